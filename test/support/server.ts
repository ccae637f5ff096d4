/** The real `kiln serve` process for end-to-end tests: started on a free port, stopped with SIGTERM. */
import { spawn, type ChildProcess } from "node:child_process";
import { resolve } from "node:path";

/** This checkout's CLI entry. */
export const KILN_BIN = resolve("bin/kiln.mjs");

/** How to start kiln: by default `node <checkout>/bin/kiln.mjs` in the test runner's directory. */
export interface HowToStart {
  /** The command line that runs kiln, before its arguments (an installed `kiln` executable, say). */
  kiln?: string[];
  /** The working directory of the process. */
  cwd?: string;
  /** Environment variables set over the test runner's own. */
  env?: Record<string, string>;
}

export interface RunningServer {
  process: ChildProcess;
  /** `http://127.0.0.1:<port>/v1` (https with --ssl-keyfile). */
  baseURL: string;
  /** `http://127.0.0.1:<port>`. */
  root: string;
  /** Everything the server wrote on stderr so far (its logs). */
  stderr(): string;
}

/**
 * Starts `kiln serve --model <slug> --port 0 --no-nightly <extra>` (no `--model` for a null slug:
 * every model loads on demand); resolves once it says it is ready. The nightly track stays off:
 * a job whose hour came during a test run would compete for the CPU and promote artifacts under
 * the test.
 */
export function startServer(slug: string | null, extraArgs: string[] = [], how: HowToStart = {}): Promise<RunningServer> {
  const [command, ...prefix] = how.kiln ?? [process.execPath, KILN_BIN];
  const child = spawn(
    command,
    [...prefix, "serve", ...(slug === null ? [] : ["--model", slug]), "--port", "0", "--log-level", "warn", "--no-nightly", ...extraArgs],
    {
      cwd: how.cwd,
      env: { ...process.env, ...how.env },
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let log = "";
  return new Promise<RunningServer>((resolve, reject) => {
    let baseURL = "";
    child.stderr!.on("data", (chunk: Buffer) => {
      log += chunk.toString();
      baseURL ||= /listening on (https?:\/\/\S+\/v1)/.exec(log)?.[1] ?? "";
      if (baseURL && log.includes("kiln serve: ready")) resolve({ process: child, baseURL, root: baseURL.replace(/\/v1$/, ""), stderr: () => log });
    });
    child.once("exit", (code) => reject(new Error(`kiln serve exited with ${code}:\n${log}`)));
  });
}

/**
 * Sends SIGTERM and resolves with the exit code, or "timeout" (after a SIGKILL) when the server has
 * not drained within `timeoutMs`, so a server that never exits fails its test file instead of
 * hanging the run.
 */
export async function stopServer(server: RunningServer | undefined, timeoutMs = 20_000): Promise<number | null | "timeout"> {
  const child = server?.process;
  if (!child || child.exitCode !== null) return child?.exitCode ?? null;
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  const code = await Promise.race([exited, new Promise<"timeout">((r) => setTimeout(r, timeoutMs, "timeout"))]);
  if (code === "timeout") child.kill("SIGKILL");
  return code;
}
