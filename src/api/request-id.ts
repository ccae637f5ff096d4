/** Request ids: the client's `x-request-id` when it is a sane token, else a fresh one. */
import { randomUUID } from "node:crypto";

/** Printable ASCII without spaces, at most 200 characters: safe to log and to echo in a header. */
const SAFE_ID = /^[\x21-\x7e]{1,200}$/;

export function requestIdFrom(header: string | string[] | undefined): string {
  const value = Array.isArray(header) ? header[0] : header;
  return value !== undefined && SAFE_ID.test(value) ? value : `req_${randomUUID().replace(/-/g, "")}`;
}
