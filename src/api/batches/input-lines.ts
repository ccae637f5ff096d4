/**
 * A batch's input file read into its requests: JSON Lines, one request a line, each
 * `{custom_id, method: "POST", url, body}` with `url` the batch's endpoint. Anything wrong is
 * reported with its line (1-based, as the reference API reports it), and a batch with any error
 * runs nothing.
 */

/** Routes a batch of the Batch API may run: the reference API's text endpoints kiln serves. */
export const BATCH_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"] as const;
/** The route of every request of a Message Batch (Anthropic's Message Batches API). */
export const MESSAGE_BATCH_ENDPOINT = "/v1/messages";
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number] | typeof MESSAGE_BATCH_ENDPOINT;

/** Most requests in one batch: 50,000, as the reference API allows. */
export const MAX_BATCH_REQUESTS = 50_000;
/** Most requests in one Message Batch: 100,000, as Anthropic's API allows. */
export const MAX_MESSAGE_BATCH_REQUESTS = 100_000;

/** Most errors reported for one input file; past them the file is not read further. */
const MAX_REPORTED_ERRORS = 100;

/** One request of a batch: its place in the file (0-based), the caller's id for it, and the body sent to the endpoint. */
export interface BatchLine {
  line: number;
  customId: string;
  body: Record<string, unknown>;
}

/** What is wrong with an input file, as a batch's `errors.data` lists it. */
export interface BatchLineError {
  code: string;
  message: string;
  param: string | null;
  /** 1-based line of the input file; null for the file as a whole. */
  line: number | null;
}

/** The file's requests, or why it cannot run. */
export type ReadLines = { ok: true; lines: BatchLine[] } | { ok: false; errors: BatchLineError[] };

/** Reads and checks every line of `content` against `endpoint`. */
export function readBatchLines(content: Buffer, endpoint: BatchEndpoint): ReadLines {
  const errors: BatchLineError[] = [];
  const lines: BatchLine[] = [];
  const seen = new Set<string>();
  const text = new TextDecoder("utf-8", { fatal: false }).decode(content);
  const rows = text.split("\n");
  for (let i = 0; i < rows.length && errors.length < MAX_REPORTED_ERRORS; i++) {
    const row = rows[i].trim();
    if (row === "") continue;
    const read = readLine(row, i, endpoint);
    if ("code" in read) {
      errors.push(read);
      continue;
    }
    if (seen.has(read.customId)) {
      errors.push(lineError(i, "duplicate_custom_id", `The custom_id '${read.customId}' is used by an earlier line: each request needs its own.`, "custom_id"));
      continue;
    }
    seen.add(read.customId);
    lines.push(read);
  }
  if (errors.length === 0 && lines.length === 0) {
    errors.push({ code: "empty_file", message: "The input file holds no requests: write one JSON object a line.", param: null, line: null });
  }
  const most = endpoint === MESSAGE_BATCH_ENDPOINT ? MAX_MESSAGE_BATCH_REQUESTS : MAX_BATCH_REQUESTS;
  if (lines.length > most) {
    errors.push({
      code: "too_many_requests",
      message: `The input file holds ${lines.length} requests; a batch takes at most ${most}. Split it into several batches.`,
      param: null,
      line: null,
    });
  }
  return errors.length > 0 ? { ok: false, errors } : { ok: true, lines };
}

function readLine(row: string, index: number, endpoint: BatchEndpoint): BatchLine | BatchLineError {
  let value: unknown;
  try {
    value = JSON.parse(row);
  } catch (err) {
    return lineError(index, "invalid_json_line", `This line is not valid JSON (${(err as Error).message}).`, null);
  }
  if (!isObject(value)) return lineError(index, "invalid_json_line", "Each line must be a JSON object: {custom_id, method, url, body}.", null);
  const { custom_id: customId, method, url, body } = value;
  if (typeof customId !== "string" || customId === "") {
    return lineError(index, "missing_required_parameter", "Each request needs a custom_id: a non-empty string naming it in the output.", "custom_id");
  }
  if (method !== "POST") return lineError(index, "invalid_value", `'method' must be "POST" (got ${JSON.stringify(method ?? null)}).`, "method");
  if (url !== endpoint) {
    return lineError(index, "mismatched_endpoint", `'url' must be the batch's endpoint '${endpoint}' (got ${JSON.stringify(url ?? null)}).`, "url");
  }
  if (!isObject(body)) return lineError(index, "missing_required_parameter", "Each request needs a 'body': the JSON object sent to the endpoint.", "body");
  if (body.stream === true) return lineError(index, "invalid_value", "A batch's answers go to a file, not a stream: leave out 'stream'.", "body.stream");
  return { line: index, customId, body };
}

function lineError(index: number, code: string, message: string, param: string | null): BatchLineError {
  return { code, message, param, line: index + 1 };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
