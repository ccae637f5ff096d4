/**
 * The Files and Batch APIs' requests: an upload's form fields, POST /v1/batches, and the list
 * routes' query strings, checked as the reference API checks them.
 */
import { z } from "zod";
import { BATCH_ENDPOINTS } from "../batches/input-lines.js";

/** Purposes an upload may name (the reference API's); only `batch` files feed anything in kiln. */
export const UPLOAD_PURPOSES = ["batch", "assistants", "fine-tune", "vision", "user_data", "evals"] as const;

/** An expiry after creation: at least an hour, at most 30 days, as the reference API allows. */
const expiresAfter = z.object({
  anchor: z.literal("created_at"),
  seconds: z.coerce
    .number()
    .int()
    .min(3600)
    .max(30 * 86_400),
});

/** POST /v1/files's text fields (the `file` part is read apart). */
export const fileUploadSchema = z.object({
  purpose: z.enum(UPLOAD_PURPOSES),
  /** When the file expires; default never (kept until deleted). */
  expires_after: expiresAfter.optional(),
});

export type FileUpload = z.output<typeof fileUploadSchema>;

export const fileListQuery = z.looseObject({
  purpose: z.string().min(1).optional(),
  order: z.enum(["asc", "desc"]).default("desc"),
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(10_000).default(10_000),
});

export const batchCreateSchema = z.object({
  input_file_id: z.string().min(1),
  endpoint: z.enum(BATCH_ENDPOINTS),
  completion_window: z.literal("24h"),
  /** Up to 16 string pairs, keys up to 64 characters and values up to 512, as the reference API's metadata. */
  metadata: z
    .record(z.string().max(64), z.string().max(512))
    .refine((m) => Object.keys(m).length <= 16, "'metadata' holds at most 16 pairs.")
    .nullish(),
  /** When the batch's output and error files expire; default never. */
  output_expires_after: expiresAfter.optional(),
});

export type BatchCreate = z.output<typeof batchCreateSchema>;

export const batchListQuery = z.looseObject({
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});
