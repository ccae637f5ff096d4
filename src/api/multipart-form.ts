/**
 * multipart/form-data bodies (an audio upload, a file upload): one `file` part read into memory
 * with bounded size, and small text fields. Each route registers the parser in its own
 * encapsulated context, so every other route keeps the JSON parser and its body limit.
 */
import multipart, { type MultipartFile, type MultipartValue } from "@fastify/multipart";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { apiError, ApiError } from "./errors.js";

/** A form's text fields: each name with every value sent for it, in order. */
export type FormFields = Record<string, string[]>;

/** The uploaded file. */
export interface Upload {
  bytes: Buffer;
  filename: string | undefined;
}

/** What a route's form may hold. */
export interface FormSpec {
  /** Most bytes of the file; past them the answer is `fileTooLarge()`. */
  maxFileBytes: number;
  /** Most bytes of one text field. */
  maxFieldBytes: number;
  /** The request, in messages ("the transcription request"). */
  what: string;
  /** The 413 of a file past `maxFileBytes`. */
  fileTooLarge: () => ApiError;
  /** The message of a form without its file. */
  missingFile: string;
}

/** Most fields, files and parts of a form. */
const PART_LIMITS = { files: 4, fields: 32, parts: 40, headerPairs: 100 };

/** Room for the form around the file: boundaries, part headers and the text fields. */
const FORM_OVERHEAD_BYTES = 1024 * 1024;

/** Registers the multipart parser with `spec`'s limits (busboy cuts the file, and fields, past them) in `app`'s context. */
export async function registerMultipart(app: FastifyInstance, spec: FormSpec): Promise<void> {
  await app.register(multipart, { limits: { ...PART_LIMITS, fileSize: spec.maxFileBytes, fieldSize: spec.maxFieldBytes }, throwFileSizeLimit: true });
}

/** Reads the multipart form: the text fields, and the `file` part into memory (bounded). */
export async function readForm(request: FastifyRequest, spec: FormSpec): Promise<{ fields: FormFields; upload: Upload | null }> {
  if (!request.isMultipart()) {
    throw apiError("invalid_request", `Send ${spec.what} as multipart/form-data, with the file in a 'file' part.`);
  }
  assertDeclaredLengthFits(request, spec);
  const fields: FormFields = {};
  let upload: Upload | null = null;
  try {
    for await (const part of request.parts()) {
      if (part.type === "file") {
        if (part.fieldname !== "file") await discard(part);
        else if (upload) throw apiError("invalid_value", "Send one file per request: the form has more than one 'file' part.", "file");
        else upload = { bytes: await readFileBounded(part, spec), filename: part.filename || undefined };
      } else {
        addField(fields, part, spec);
      }
    }
  } catch (err) {
    throw multipartError(err, spec);
  }
  return { fields, upload };
}

/** The form's file, or a 400 naming `file`. */
export function requireFile(upload: Upload | null, spec: FormSpec): Upload {
  if (!upload) throw apiError("missing_required_parameter", spec.missingFile, "file");
  return upload;
}

/** A body declared larger than any acceptable form is refused before a byte of it is read. */
function assertDeclaredLengthFits(request: FastifyRequest, spec: FormSpec): void {
  const declared = Number(request.headers["content-length"]);
  if (Number.isFinite(declared) && declared > spec.maxFileBytes + FORM_OVERHEAD_BYTES) throw spec.fileTooLarge();
}

function addField(fields: FormFields, part: MultipartValue, spec: FormSpec): void {
  if (part.valueTruncated) {
    throw apiError("request_too_large", `The form field '${part.fieldname}' is longer than ${spec.maxFieldBytes} bytes.`, part.fieldname);
  }
  if (part.fieldname === "file") {
    throw apiError("invalid_type", "'file' must be an uploaded file (a file part of the form), not a text field.", "file");
  }
  (fields[part.fieldname] ??= []).push(String(part.value));
}

/** The file's bytes, stopping at the first byte past the limit (busboy cuts the file there). */
async function readFileBounded(part: MultipartFile, spec: FormSpec): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of part.file) {
    if (part.file.truncated) throw spec.fileTooLarge();
    chunks.push(chunk as Buffer);
  }
  if (part.file.truncated) throw spec.fileTooLarge();
  return Buffer.concat(chunks);
}

/** Reads a file part nobody asked for to its end, keeping nothing. */
async function discard(part: MultipartFile): Promise<void> {
  for await (const _ of part.file);
}

/** The multipart parser's own errors, in the API's words. */
function multipartError(err: unknown, spec: FormSpec): unknown {
  const code = (err as { code?: unknown }).code;
  switch (code) {
    case "FST_REQ_FILE_TOO_LARGE":
      return spec.fileTooLarge();
    case "FST_PARTS_LIMIT":
    case "FST_FIELDS_LIMIT":
    case "FST_FILES_LIMIT":
      return apiError(
        "request_too_large",
        `The form has more parts than this route takes (at most ${PART_LIMITS.fields} fields and ${PART_LIMITS.files} files).`,
      );
    case "FST_PROTO_VIOLATION":
      return apiError("invalid_request", "The form has a field whose name is not allowed.");
    case "FST_INVALID_JSON_FIELD_ERROR":
      return apiError("invalid_request", "A form field declared as JSON does not hold valid JSON.");
    default:
      // What else the form reading throws without a status is busboy's: a body that is not well-formed multipart.
      if (err instanceof Error && !(err instanceof ApiError) && (err as { statusCode?: unknown }).statusCode === undefined) {
        return apiError("invalid_request", `The multipart/form-data body could not be read: ${err.message}.`);
      }
      return err;
  }
}
