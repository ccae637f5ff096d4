/**
 * Downloads files the way the Hugging Face hub serves them:
 * `GET {endpoint}/{repo}/resolve/{revision}/{path}`, usually answered by a 302 to a CDN whose
 * first response carries `X-Linked-Etag` (the file's SHA-256 for LFS files) and `X-Linked-Size`.
 *
 * The body goes to `<file>.part`, hashed while it is written; an interrupted `.part` is resumed with
 * `Range: bytes=N-` (206 appends, 200 restarts); a dropped connection is retried with backoff; the
 * size and SHA-256 are checked before the `.part` is renamed into place.
 */
import { createHash, type Hash } from "node:crypto";
import { createWriteStream, type WriteStream } from "node:fs";
import { rename } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import { abortError, ChecksumError, HttpStatusError, SizeError } from "./errors.js";
import { ensureParent, fileSize, hashInto, removeQuietly, sha256File } from "./store.js";

export const DEFAULT_HUB_ENDPOINT = "https://huggingface.co";

/** `KILN_HUB_ENDPOINT`, then `HF_ENDPOINT`, then the public hub. No trailing slash. */
export function hubEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  const value = env.KILN_HUB_ENDPOINT || env.HF_ENDPOINT || DEFAULT_HUB_ENDPOINT;
  return value.replace(/\/+$/, "");
}

/** `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`), when set. */
export function hubToken(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN || undefined;
}

/** `{endpoint}/{repo}/resolve/{revision}/{path}` with each path segment escaped. */
export function resolveUrl(endpoint: string, repo: string, revision: string, path: string): string {
  const segments = path.split("/").map(encodeURIComponent).join("/");
  return `${endpoint.replace(/\/+$/, "")}/${repo}/resolve/${encodeURIComponent(revision)}/${segments}`;
}

export interface HubRequestOptions {
  /** Hub endpoint (default: `hubEndpoint()`). */
  endpoint?: string;
  /** Bearer token; `null` sends none (default: `hubToken()`). */
  token?: string | null;
  signal?: AbortSignal;
  /** Socket idle timeout in ms (default 30 s). */
  timeoutMs?: number;
}

export interface DownloadOptions extends HubRequestOptions {
  /** Called as bytes arrive (at most ~10 times a second, and once at the end). */
  onProgress?: (bytesDone: number, bytesTotal: number | null, bytesPerSecond: number) => void;
  /** Retries after a dropped connection or a 5xx/429 (default 5). */
  retries?: number;
  /** First backoff delay in ms, doubled each retry, capped at 15 s (default 500). */
  retryDelayMs?: number;
}

export interface HubFile {
  repo: string;
  revision: string;
  /** Path inside the repository. */
  path: string;
  /** Local destination file. */
  dest: string;
  /** Expected SHA-256; when absent the hub's `X-Linked-Etag` (or `ETag`) is used. */
  sha256?: string;
  /** Expected size; when absent `X-Linked-Size` / `Content-Length` / `Content-Range` is used. */
  bytes?: number;
}

export interface DownloadResult {
  sha256: string;
  bytes: number;
  /** True when an earlier `.part` (or an interrupted attempt) was continued with a Range request. */
  resumed: boolean;
  /** HTTP attempts made (1 when nothing went wrong). */
  attempts: number;
}

/** What a HEAD on the resolve URL says about a file. */
export interface HubFileInfo {
  sha256?: string;
  /** Git blob id, for files not stored in LFS. */
  gitOid?: string;
  bytes?: number;
}

/** A failure worth retrying: the connection dropped, the body was cut short. */
class TransientError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TransientError";
  }
}

const TRANSIENT_CODES = new Set(["ECONNRESET", "EPIPE", "ETIMEDOUT", "ECONNABORTED", "ERR_STREAM_PREMATURE_CLOSE", "UND_ERR_SOCKET", "HPE_INVALID_CONSTANT"]);

function isTransient(err: unknown): boolean {
  if (err instanceof TransientError) return true;
  if (err instanceof HttpStatusError) return err.retryable;
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code && TRANSIENT_CODES.has(code)) return true;
    return err.message === "aborted" || err.message === "socket hang up";
  }
  return false;
}

function normaliseEtag(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return undefined;
  return v.replace(/^W\//, "").replace(/^"|"$/g, "").toLowerCase();
}

function headerNumber(value: string | string[] | undefined): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || !/^\d+$/.test(v.trim())) return undefined;
  return Number(v.trim());
}

function parseContentRange(value: string | undefined): { start?: number; end?: number; total?: number } | null {
  if (!value) return null;
  const m = /^bytes\s+(?:(\d+)-(\d+)|\*)\/(\d+|\*)$/i.exec(value.trim());
  if (!m) return null;
  return {
    start: m[1] !== undefined ? Number(m[1]) : undefined,
    end: m[2] !== undefined ? Number(m[2]) : undefined,
    total: m[3] !== "*" ? Number(m[3]) : undefined,
  };
}

function requestOnce(
  url: URL,
  method: "GET" | "HEAD",
  headers: Record<string, string>,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<http.IncomingMessage> {
  const mod = url.protocol === "https:" ? https : url.protocol === "http:" ? http : null;
  if (!mod) return Promise.reject(new Error(`unsupported URL scheme: ${url.protocol}`));
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { method, headers, signal });
    req.setTimeout(timeoutMs, () => {
      const err = new Error(`no data for ${Math.round(timeoutMs / 1000)} s`) as NodeJS.ErrnoException;
      err.code = "ETIMEDOUT";
      req.destroy(err);
    });
    req.on("response", resolve);
    req.on("error", reject);
    req.end();
  });
}

interface Opened {
  res: http.IncomingMessage;
  /** First `X-Linked-Etag` seen along the redirect chain, or the ETag of a response on the origin host. */
  etag?: string;
  linkedSize?: number;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * Issues the request and follows redirects by hand: the hub's own headers are on the first hop,
 * and the token must not travel to a CDN on another host.
 */
async function openFollowing(
  start: string,
  method: "GET" | "HEAD",
  extraHeaders: Record<string, string>,
  options: HubRequestOptions & { stopAtLinked?: boolean },
): Promise<Opened> {
  const origin = new URL(start);
  const token = options.token === undefined ? hubToken() : (options.token ?? undefined);
  const timeoutMs = options.timeoutMs ?? 30_000;
  let url = origin;
  let etag: string | undefined;
  let linkedSize: number | undefined;
  let onOrigin = true;
  for (let hop = 0; hop <= 10; hop++) {
    const headers: Record<string, string> = { "user-agent": "kiln/0.1", "accept-encoding": "identity", ...extraHeaders };
    const sameOrigin = url.host === origin.host && url.protocol === origin.protocol;
    if (token && sameOrigin) headers.authorization = `Bearer ${token}`;
    const res = await requestOnce(url, method, headers, timeoutMs, options.signal);
    const linked = normaliseEtag(res.headers["x-linked-etag"]);
    if (etag === undefined && linked) etag = linked;
    if (linkedSize === undefined) linkedSize = headerNumber(res.headers["x-linked-size"]);
    const status = res.statusCode ?? 0;
    const location = res.headers.location;
    if (REDIRECTS.has(status) && location && !(options.stopAtLinked && linked)) {
      // A redirect on the origin host (a renamed repository) is followed like any other; its ETag
      // is not the file's. Only `X-Linked-Etag` counts along the chain.
      res.resume();
      url = new URL(location, url);
      if (url.host !== origin.host) onOrigin = false;
      continue;
    }
    if (etag === undefined && onOrigin) etag = normaliseEtag(res.headers.etag);
    return { res, etag, linkedSize };
  }
  throw new Error(`too many redirects from ${start}`);
}

function readErrorDetail(res: http.IncomingMessage): string | undefined {
  const header = res.headers["x-error-message"];
  res.resume();
  return typeof header === "string" ? header : undefined;
}

/** HEAD on the resolve URL (stops at the hub's redirect): the file's hash and size, when given. */
export async function hubFileInfo(repo: string, revision: string, path: string, options: HubRequestOptions = {}): Promise<HubFileInfo> {
  const url = resolveUrl(options.endpoint ?? hubEndpoint(), repo, revision, path);
  const { res, etag, linkedSize } = await openFollowing(url, "HEAD", {}, { ...options, stopAtLinked: true });
  const status = res.statusCode ?? 0;
  const detail = readErrorDetail(res);
  if (status >= 400) throw new HttpStatusError(status, res.statusMessage ?? "", detail);
  const info: HubFileInfo = { bytes: linkedSize ?? (status === 200 ? headerNumber(res.headers["content-length"]) : undefined) };
  if (etag && /^[0-9a-f]{64}$/.test(etag)) info.sha256 = etag;
  else if (etag && /^[0-9a-f]{40}$/.test(etag)) info.gitOid = etag;
  return info;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

async function closeStream(out: WriteStream): Promise<void> {
  if (out.closed) return;
  await new Promise<void>((resolve) => {
    out.once("close", () => resolve());
    out.once("error", () => resolve());
    out.end();
  });
}

async function writeChunk(out: WriteStream, chunk: Buffer): Promise<void> {
  if (out.write(chunk)) return;
  await new Promise<void>((resolve, reject) => {
    const onDrain = () => {
      out.off("error", onError);
      resolve();
    };
    const onError = (err: Error) => {
      out.off("drain", onDrain);
      reject(err);
    };
    out.once("drain", onDrain);
    out.once("error", onError);
  });
}

/**
 * Downloads one file from the hub into `file.dest` (via `file.dest + ".part"`), resuming and
 * retrying as needed, and verifies its size and SHA-256 (or git blob id) before renaming it into place.
 */
export async function downloadHubFile(file: HubFile, options: DownloadOptions = {}): Promise<DownloadResult> {
  const url = resolveUrl(options.endpoint ?? hubEndpoint(), file.repo, file.revision, file.path);
  const part = `${file.dest}.part`;
  const maxRetries = options.retries ?? 5;
  const baseDelay = options.retryDelayMs ?? 500;
  const signal = options.signal;
  await ensureParent(file.dest);

  let expectedSha = file.sha256?.toLowerCase();
  let expectedBytes = file.bytes;
  let gitOid: string | undefined;
  // Hash state carried across attempts: `hasher` covers the first `hashed` bytes of the part file.
  let hasher: Hash | null = null;
  let gitHasher: Hash | null = null;
  let hashed = 0;
  let resumed = false;
  let attempts = 0;
  let lastReport = 0;

  const finish = async (): Promise<DownloadResult> => {
    const bytes = (await fileSize(part)) ?? 0;
    if (hasher === null || hashed !== bytes) {
      hasher = createHash("sha256");
      gitHasher = gitOid ? createHash("sha1").update(`blob ${bytes}\0`) : null;
      hashed = await hashInto(part, gitHasher ? [hasher, gitHasher] : [hasher]);
    }
    if (expectedBytes !== undefined && bytes !== expectedBytes) {
      await removeQuietly(part);
      throw new SizeError(file.path, expectedBytes, bytes);
    }
    const sha256 = hasher.digest("hex");
    if (expectedSha && sha256 !== expectedSha) {
      await removeQuietly(part);
      throw new ChecksumError(file.path, expectedSha, sha256);
    }
    if (!expectedSha && gitOid && gitHasher) {
      const oid = gitHasher.digest("hex");
      if (oid !== gitOid) {
        await removeQuietly(part);
        throw new ChecksumError(file.path, gitOid, oid, "git blob sha1");
      }
    }
    await rename(part, file.dest);
    options.onProgress?.(bytes, bytes, 0);
    return { sha256, bytes, resumed, attempts };
  };

  for (;;) {
    if (signal?.aborted) throw abortError(signal);
    let partSize = (await fileSize(part)) ?? 0;
    if (expectedBytes !== undefined && partSize > expectedBytes) {
      await removeQuietly(part);
      partSize = 0;
    }
    if (hasher === null || hashed !== partSize) {
      // First attempt over a part left by an earlier run, or the part changed under us: hash what is there.
      hasher = createHash("sha256");
      gitHasher = null;
      hashed = partSize > 0 ? await hashInto(part, [hasher], partSize) : 0;
    }
    if (partSize > 0 && expectedSha && expectedBytes === partSize) {
      resumed = true;
      return finish();
    }

    attempts++;
    try {
      const headers: Record<string, string> = {};
      if (partSize > 0) headers.range = `bytes=${partSize}-`;
      const { res, etag, linkedSize } = await openFollowing(url, "GET", headers, options);
      if (!expectedSha && etag) {
        if (/^[0-9a-f]{64}$/.test(etag)) expectedSha = etag;
        else if (/^[0-9a-f]{40}$/.test(etag)) gitOid = etag;
      }
      if (expectedBytes === undefined && linkedSize !== undefined) expectedBytes = linkedSize;
      const status = res.statusCode ?? 0;
      let offset: number;
      if (status === 200) {
        offset = 0;
        const length = headerNumber(res.headers["content-length"]);
        if (expectedBytes === undefined && length !== undefined) expectedBytes = length;
        if (partSize > 0) resumed = false; // the server ignored the range: start over
        hasher = createHash("sha256");
        gitHasher = gitOid && expectedBytes !== undefined ? createHash("sha1").update(`blob ${expectedBytes}\0`) : null;
        hashed = 0;
      } else if (status === 206) {
        const range = parseContentRange(res.headers["content-range"] as string | undefined);
        if (!range || range.start !== partSize) {
          res.resume();
          await removeQuietly(part);
          hasher = null;
          throw new TransientError(`unexpected Content-Range ${String(res.headers["content-range"])} for offset ${partSize}`);
        }
        if (expectedBytes === undefined && range.total !== undefined) expectedBytes = range.total;
        offset = partSize;
        resumed = true;
        gitHasher = null; // the git id needs the whole file hashed from the start; the sha256 still applies
      } else if (status === 416) {
        const range = parseContentRange(res.headers["content-range"] as string | undefined);
        res.resume();
        const total = range?.total ?? expectedBytes;
        if (total !== undefined && total === partSize) {
          expectedBytes = total;
          resumed = true;
          return await finish();
        }
        await removeQuietly(part);
        hasher = null;
        throw new TransientError(`range not satisfiable at offset ${partSize}`);
      } else {
        throw new HttpStatusError(status, res.statusMessage ?? "", readErrorDetail(res));
      }

      const out = createWriteStream(part, { flags: offset === 0 ? "w" : "a" });
      let done = offset;
      const started = Date.now();
      try {
        for await (const chunk of res as AsyncIterable<Buffer>) {
          if (expectedBytes !== undefined && done + chunk.length > expectedBytes) {
            res.destroy();
            throw new SizeError(file.path, expectedBytes, done + chunk.length);
          }
          hasher.update(chunk);
          gitHasher?.update(chunk);
          await writeChunk(out, chunk);
          done += chunk.length;
          hashed = done;
          const now = Date.now();
          if (options.onProgress && now - lastReport >= 100) {
            lastReport = now;
            const elapsed = Math.max(1, now - started) / 1000;
            options.onProgress(done, expectedBytes ?? null, (done - offset) / elapsed);
          }
        }
      } finally {
        await closeStream(out);
      }
      if (expectedBytes !== undefined && done < expectedBytes) {
        throw new TransientError(`connection closed after ${done} of ${expectedBytes} bytes`);
      }
      expectedBytes ??= done;
      return await finish();
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      if (err instanceof SizeError) await removeQuietly(part);
      if (!isTransient(err) || attempts > maxRetries) throw err;
      await sleep(Math.min(15_000, baseDelay * 2 ** (attempts - 1)), signal);
    }
  }
}

/**
 * Checks an already-present local file against the hub (HEAD for its hash when none is known).
 * Returns its hash and size when it matches, null when it does not.
 */
export async function verifyAgainstHub(
  file: Omit<HubFile, "dest"> & { local: string },
  options: HubRequestOptions = {},
): Promise<{ sha256: string; bytes: number } | null> {
  const size = await fileSize(file.local);
  if (size === null) return null;
  if (file.bytes !== undefined && size !== file.bytes) return null;
  let expected = file.sha256?.toLowerCase();
  if (!expected) {
    const info = await hubFileInfo(file.repo, file.revision, file.path, options);
    if (info.bytes !== undefined && info.bytes !== size) return null;
    if (info.gitOid && !info.sha256) {
      const sha1 = createHash("sha1").update(`blob ${size}\0`);
      const sha = createHash("sha256");
      await hashInto(file.local, [sha1, sha]);
      return sha1.digest("hex") === info.gitOid ? { sha256: sha.digest("hex"), bytes: size } : null;
    }
    expected = info.sha256;
  }
  const actual = await sha256File(file.local);
  if (expected && actual.sha256 !== expected) return null;
  return expected ? actual : null;
}
