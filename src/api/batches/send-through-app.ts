/** How a batch's requests reach their endpoints: through the app's own routes, with a key the server issues to itself. */
import type { FastifyInstance } from "fastify";
import type { BatchKey } from "../../catalogue/stored-batches.js";
import type { InternalKeys } from "../auth/auth.js";
import type { ApiKeyInfo } from "../cloud-port.js";
import type { LineAnswer } from "./batch-runner.js";

/**
 * One request of a batch, sent through the app's own routes as the batch's key, so it is checked,
 * scheduled, counted and metered as any other. A 429 or 503 that names a wait (and does not say a
 * retry cannot succeed) is answered with that wait, for the runner to try again.
 */
export async function sendThroughApp(app: FastifyInstance, keys: InternalKeys, endpoint: string, body: unknown, key: BatchKey): Promise<LineAnswer> {
  // A batch's key is the ApiKeyInfo its route stored (`routes/batches.ts`).
  const token = keys.issue(key as unknown as ApiKeyInfo);
  try {
    const res = await app.inject({
      method: "POST",
      url: endpoint,
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      payload: JSON.stringify(body),
    });
    const retryAfter = Number(res.headers["retry-after"]);
    // 529: Anthropic's overloaded, as a Message Batch's requests are answered.
    const retryable = [429, 503, 529].includes(res.statusCode) && res.headers["x-should-retry"] !== "false" && Number.isFinite(retryAfter);
    let answer: unknown;
    try {
      answer = res.json();
    } catch {
      answer = { error: { message: res.body, type: "server_error", param: null, code: null } };
    }
    return { status: res.statusCode, requestId: String(res.headers["x-request-id"] ?? ""), body: answer, ...(retryable ? { retryAfter } : {}) };
  } finally {
    keys.revoke(token);
  }
}
