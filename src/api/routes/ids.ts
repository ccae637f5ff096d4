/** Ids of answers, as the OpenAI API shapes them (`chatcmpl-…`, `cmpl-…`); `transcr-…` keys a transcription's usage record. */
import { randomBytes } from "node:crypto";

export function answerId(prefix: "chatcmpl" | "cmpl" | "transcr"): string {
  return `${prefix}-${randomBytes(15).toString("base64url")}`;
}

/** Unix seconds now. */
export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}
