/**
 * Request fields shared by the generation endpoints, and the rule for fields kiln does not honour
 * yet: they are accepted only when absent, null or at their default (no effect), otherwise a 400
 * names them. Nothing a client asks for is silently ignored.
 */
import { z } from "zod";
import { apiError } from "../errors.js";

/** Most choices per request (`n`): they share one prompt pass and then decode side by side. */
export const MAX_CHOICES = 8;
/** Most stop strings, as in the OpenAI API. */
export const MAX_STOP = 4;

const range = (min: number, max: number) => z.number().min(min).max(max).nullish();

/** The sampling fields both endpoints take (OpenAI names; top_k and min_p are kiln extensions). */
export const samplingFields = {
  temperature: range(0, 2),
  top_p: range(0, 1),
  top_k: z.number().int().min(-1).nullish(),
  min_p: range(0, 1),
  presence_penalty: range(-2, 2),
  frequency_penalty: range(-2, 2),
  logit_bias: z.record(z.string(), z.number().min(-100).max(100)).nullish(),
  seed: z.number().int().nullish(),
  n: z.number().int().min(1).max(MAX_CHOICES).nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(MAX_STOP)]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  user: z.string().nullish(),
};

const sharedSchema = z.object(samplingFields);
/** The fields of {@link samplingFields}, as parsed. */
export type SharedFields = z.output<typeof sharedSchema>;

/** Stop strings as a list (none for null/absent). */
export function stopList(stop: string | string[] | null | undefined): string[] {
  if (stop === null || stop === undefined) return [];
  return typeof stop === "string" ? [stop] : stop;
}

/** A field kiln does not honour yet: `accepts` says which values are harmless (null and absent always are). */
export interface UnsupportedField {
  field: string;
  accepts?: (value: unknown) => boolean;
  /** Why it is refused, for the message. */
  why: string;
}

/** Throws a 400 for the first field in `body` that asks for something kiln does not do. */
export function rejectUnsupported(body: Record<string, unknown>, fields: readonly UnsupportedField[]): void {
  for (const { field, accepts, why } of fields) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (accepts?.(value)) continue;
    throw apiError("unsupported_parameter", `Unsupported parameter: '${field}' ${why}`, field);
  }
}

export const isEmptyArray = (v: unknown): boolean => Array.isArray(v) && v.length === 0;
export const isOneOf =
  (...allowed: unknown[]) =>
  (v: unknown): boolean =>
    allowed.includes(v);

/** `stream_options` only means something when streaming. */
export function checkStreamOptions(body: { stream?: boolean | null; stream_options?: unknown }): void {
  if (body.stream_options !== null && body.stream_options !== undefined && body.stream !== true) {
    throw apiError("invalid_value", "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options");
  }
}
