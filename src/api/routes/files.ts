/**
 * The Files API: POST /v1/files (an upload, e.g. a batch's input), GET /v1/files (a key's files),
 * GET and DELETE /v1/files/{id}, GET /v1/files/{id}/content (the bytes). A file belongs to the key
 * that uploaded it (or whose batch wrote it) and is found only with that key.
 */
import { randomBytes } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { StoredFileInfo } from "../../catalogue/stored-files.js";
import { ownerKeyId } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { readForm, registerMultipart, requireFile, type FormSpec } from "../multipart-form.js";
import { fileListQuery, fileUploadSchema } from "../protocol/batches.js";
import { parseOrThrow } from "../protocol/issues.js";
import { formObject } from "../protocol/transcriptions.js";
import { unixNow } from "./ids.js";

/** Most bytes of an uploaded file: 200 MiB, the reference API's limit for a batch's input. */
export const MAX_UPLOAD_BYTES = 200 * 1024 * 1024;

const UPLOAD_FORM: FormSpec = {
  maxFileBytes: MAX_UPLOAD_BYTES,
  maxFieldBytes: 1024,
  what: "the upload",
  fileTooLarge: () => apiError("file_too_large", `The file is larger than the ${MAX_UPLOAD_BYTES / (1024 * 1024)} MB limit: split it.`, "file"),
  missingFile: "Missing required parameter: 'file' (the file, as a file part of the form).",
};

export async function filesRoutes(app: FastifyInstance, ctx: ApiContext): Promise<void> {
  await registerMultipart(app, UPLOAD_FORM);

  app.post("/files", async (request) => {
    const { fields, upload } = await readForm(request, UPLOAD_FORM);
    const form = parseOrThrow(fileUploadSchema, formObject(fields));
    const file = requireFile(upload, UPLOAD_FORM);
    if (file.bytes.length === 0) throw apiError("invalid_value", "The file is empty.", "file");
    const createdAt = unixNow();
    const info: StoredFileInfo = {
      id: `file-${randomBytes(12).toString("hex")}`,
      keyId: ownerKeyId(request),
      createdAt,
      expiresAt: form.expires_after ? createdAt + form.expires_after.seconds : null,
      filename: file.filename ?? "upload",
      purpose: form.purpose,
      bytes: file.bytes.length,
    };
    await ctx.files.save(info, file.bytes);
    return fileObject(info);
  });

  app.get("/files", async (request) => {
    const query = parseOrThrow(fileListQuery, request.query ?? {});
    const { files, hasMore } = await ctx.files.list(ownerKeyId(request), query);
    const data = files.map(fileObject);
    return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: hasMore };
  });

  app.get("/files/:id", async (request) => fileObject(await storedFile(ctx, request)));

  app.get("/files/:id/content", async (request, reply) => {
    const id = fileId(request);
    const content = await ctx.files.content(id, ownerKeyId(request));
    if (!content) throw fileNotFound(id);
    return reply.type("application/octet-stream").send(content);
  });

  app.delete("/files/:id", async (request) => {
    const id = fileId(request);
    if (!(await ctx.files.delete(id, ownerKeyId(request)))) throw fileNotFound(id);
    return { id, object: "file", deleted: true };
  });
}

/** A file as the Files API describes it. */
export function fileObject(info: StoredFileInfo): Record<string, unknown> {
  return {
    id: info.id,
    object: "file",
    bytes: info.bytes,
    created_at: info.createdAt,
    expires_at: info.expiresAt,
    filename: info.filename,
    purpose: info.purpose,
    status: "processed",
    status_details: null,
  };
}

async function storedFile(ctx: ApiContext, request: FastifyRequest): Promise<StoredFileInfo> {
  const id = fileId(request);
  const info = await ctx.files.get(id, ownerKeyId(request));
  if (!info) throw fileNotFound(id);
  return info;
}

function fileId(request: FastifyRequest): string {
  return (request.params as { id: string }).id;
}

export function fileNotFound(id: string) {
  return apiError("file_not_found", `No such File object: ${id}`);
}
