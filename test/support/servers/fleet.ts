/**
 * A fleet of real `kiln serve` replicas behind a real nginx: each replica on its own free port,
 * started together, with the same options; in cloud mode each gets the same database, limits store
 * and key secret, as in production. Used by the fleet test and `npm run bench -- cloud`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { freePort } from "./free-port.js";
import { startNginx, type RunningNginx } from "./nginx.js";

export interface CloudSettings {
  /** `postgres://…` of the shared database. */
  databaseUrl: string;
  /** `redis://…` of the shared limit counters. */
  limitsUrl: string;
  /** `KILN_KEY_SECRET`, the same on every replica. */
  keySecret: string;
}

export interface FleetOptions {
  replicas: number;
  slug: string;
  /** Cloud mode's shared stores; null: local mode (any key). */
  cloud: CloudSettings | null;
  /** More `kiln serve` options, for every replica. */
  serveArgs?: string[];
  /** More environment, for every replica. */
  env?: NodeJS.ProcessEnv;
}

export interface Replica {
  port: number;
  process: ChildProcess;
  /** Everything the replica wrote on stderr so far. */
  stderr(): string;
}

export interface RunningFleet {
  /** nginx: `http://127.0.0.1:<port>`; the API is under `/v1`. */
  url: string;
  replicas: Replica[];
  nginx: RunningNginx;
  /** SIGTERM to every replica still running (SIGKILL after 20 s), then stops nginx. */
  stop(): Promise<void>;
}

export async function startFleet(options: FleetOptions): Promise<RunningFleet> {
  const ports: number[] = [];
  for (let i = 0; i < options.replicas; i++) ports.push(await freePort());
  const replicas = ports.map((port) => spawnReplica(port, options));
  try {
    await Promise.all(replicas.map(ready));
  } catch (error) {
    await Promise.all(replicas.map((r) => stopReplica(r)));
    throw error;
  }
  let nginx: RunningNginx;
  try {
    nginx = await startNginx(ports);
  } catch (error) {
    await Promise.all(replicas.map((r) => stopReplica(r)));
    throw error;
  }
  return {
    url: nginx.url,
    replicas,
    nginx,
    async stop() {
      await Promise.all(replicas.map((r) => stopReplica(r)));
      await nginx.stop();
    },
  };
}

function spawnReplica(port: number, options: FleetOptions): Replica {
  const cloudArgs = options.cloud ? ["--cloud", "--database", options.cloud.databaseUrl, "--limits", options.cloud.limitsUrl] : [];
  const args = [
    "bin/kiln.mjs",
    "serve",
    "--model",
    options.slug,
    "--port",
    String(port),
    "--log-level",
    "warn",
    "--no-nightly",
    ...cloudArgs,
    ...(options.serveArgs ?? []),
  ];
  const env = { ...process.env, ...options.env, ...(options.cloud ? { KILN_KEY_SECRET: options.cloud.keySecret } : {}) };
  const child = spawn(process.execPath, args, { env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr!.on("data", (chunk: Buffer) => (log += chunk.toString()));
  return { port, process: child, stderr: () => log };
}

/** Resolves once the replica says it is ready; rejects if it exits first. */
function ready(replica: Replica): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (replica.stderr().includes("kiln serve: ready")) {
        replica.process.stderr!.off("data", check);
        resolve();
      }
    };
    replica.process.stderr!.on("data", check);
    replica.process.once("exit", (code) => reject(new Error(`kiln serve on port ${replica.port} exited with ${code}:\n${replica.stderr()}`)));
    check();
  });
}

/** SIGTERM, SIGKILL after `timeoutMs`; resolves once the replica has exited. */
export async function stopReplica(replica: Replica, timeoutMs = 20_000): Promise<void> {
  const child = replica.process;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  await exited;
  clearTimeout(timer);
}
