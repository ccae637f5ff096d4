/** Errors raised while pulling model weights. Every message is a single line. */

/** Makes any error (or value) one short line: no newlines, no stack, bounded length. */
export function oneLine(err: unknown, max = 300): string {
  let text: string;
  if (err instanceof Error) {
    text = err.message || err.name;
    // Node's network errors put the useful part in `cause` (fetch) or `code`.
    const cause = (err as { cause?: unknown }).cause;
    if (text === "fetch failed" && cause instanceof Error) text = cause.message;
  } else {
    text = String(err);
  }
  text = text.replace(/\s+/g, " ").trim();
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

/** The pull of one model failed on every source. */
export class PullError extends Error {
  readonly slug: string;
  /** One entry per source tried: what it was and why it failed. */
  readonly attempts: readonly { source: string; error: string }[];
  constructor(slug: string, attempts: { source: string; error: string }[]) {
    const detail = attempts.length ? attempts.map((a) => `${a.source}: ${a.error}`).join("; ") : "the catalogue lists no source";
    super(`could not pull ${slug}: ${detail}`);
    this.name = "PullError";
    this.slug = slug;
    this.attempts = attempts;
  }
}

/** An HTTP status the downloader does not accept. */
export class HttpStatusError extends Error {
  readonly status: number;
  readonly retryable: boolean;
  constructor(status: number, statusText: string, detail?: string) {
    const extra = detail ? ` (${detail})` : statusText ? ` (${statusText})` : "";
    super(`HTTP ${status}${extra}`);
    this.name = "HttpStatusError";
    this.status = status;
    this.retryable = status === 408 || status === 425 || status === 429 || status >= 500;
  }
}

/** A downloaded or extracted file did not have the expected SHA-256. */
export class ChecksumError extends Error {
  readonly file: string;
  readonly expected: string;
  readonly actual: string;
  constructor(file: string, expected: string, actual: string, algorithm = "sha256") {
    super(`${algorithm} mismatch for ${file}: expected ${expected}, got ${actual}`);
    this.name = "ChecksumError";
    this.file = file;
    this.expected = expected;
    this.actual = actual;
  }
}

/** A downloaded or extracted file did not have the expected size. */
export class SizeError extends Error {
  constructor(file: string, expected: number, actual: number) {
    super(`size mismatch for ${file}: expected ${expected} bytes, got ${actual}`);
    this.name = "SizeError";
  }
}

export function abortError(signal?: AbortSignal): Error {
  const reason = signal?.reason;
  if (reason instanceof Error) return reason;
  const err = new Error("the pull was aborted");
  err.name = "AbortError";
  return err;
}

export function isAbort(err: unknown, signal?: AbortSignal): boolean {
  return (signal?.aborted ?? false) || (err instanceof Error && err.name === "AbortError");
}
