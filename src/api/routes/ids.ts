/**
 * Ids of answers, as the OpenAI API shapes them (`chatcmpl-…`, `cmpl-…`; the Responses API's
 * `resp_…` and its items' `msg_…`, `fc_…`, `fco_…`); `transcr-…` keys a transcription's usage record,
 * `tok-…` a tokenization's admission, `embd-…` an embeddings answer's usage record; Anthropic's `msg_…` and `toolu_…`.
 */
import { randomBytes } from "node:crypto";

export function answerId(prefix: "chatcmpl" | "cmpl" | "transcr" | "tok" | "embd" | "ollama"): string {
  return `${prefix}-${randomBytes(15).toString("base64url")}`;
}

/** An id of the Responses API: a response (`resp`), or an item: message (`msg`), function call (`fc`), function call output (`fco`). */
export function responsesId(prefix: "resp" | "msg" | "fc" | "fco" | "rs"): string {
  return `${prefix}_${randomBytes(24).toString("hex")}`;
}

/** An id of Anthropic's Messages API: a message (`msg`) or a tool call (`toolu`). */
export function anthropicId(prefix: "msg" | "toolu"): string {
  return `${prefix}_${randomBytes(18).toString("base64url")}`;
}

/** Unix seconds now. */
export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}
