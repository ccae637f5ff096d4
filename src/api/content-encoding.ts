/**
 * Request bodies are read as they arrive, never decompressed: a body labelled with a
 * `content-encoding` (gzip, br…) would be parsed as if it were plain, so it is refused with a 415
 * before it is read, however it was actually sent.
 */
import type { FastifyRequest } from "fastify";
import { apiError } from "./errors.js";

/** Throws a 415 when `request` has a body labelled with an encoding other than `identity`. */
export function assertPlainBody(request: FastifyRequest): void {
  const encoding = request.headers["content-encoding"];
  if (encoding === undefined) return;
  const length = request.headers["content-length"];
  const hasBody = request.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
  if (!hasBody) return;
  const codings = encoding
    .split(",")
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== "" && c !== "identity");
  if (codings.length === 0) return;
  throw apiError(
    "unsupported_content_encoding",
    `The request body is labelled 'content-encoding: ${encoding}', and this server reads only plain (identity) bodies: send the body uncompressed, without that header.`,
  );
}
