/**
 * A real PostgreSQL server for tests (Debian's `postgresql` package, installed by scripts/setup.sh):
 * a new cluster in a temporary directory on a free port, with a database `kiln`, trust auth for
 * 127.0.0.1 and fsync off. Postgres refuses to run as root, so as root every command runs as the
 * `postgres` user the package creates, with the directory handed to it.
 */
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./free-port.js";
import { runCommand } from "./process.js";

export interface RunningPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/kiln`. */
  url: string;
  port: number;
  /** Stops the server (immediate shutdown) and removes its directory. */
  stop(): Promise<void>;
}

const POSTGRES_ROOT = "/usr/lib/postgresql";

/** The path of a PostgreSQL program (`initdb`, `pg_ctl`, `pg_dump`, ...) of the newest installed major version. */
export function postgresBinary(name: string): string {
  const versions = existsSync(POSTGRES_ROOT) ? readdirSync(POSTGRES_ROOT).filter((v) => /^\d+$/.test(v)) : [];
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!newest) throw new Error(`no PostgreSQL under ${POSTGRES_ROOT}: run scripts/setup.sh (installs Debian's postgresql)`);
  return join(POSTGRES_ROOT, newest, "bin", name);
}

/** The command line run as the `postgres` user when this process is root (postgres refuses root). */
export function asPostgresUser(argv: string[]): string[] {
  return process.getuid?.() === 0 ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
}

export async function startPostgres(): Promise<RunningPostgres> {
  const dir = mkdtempSync(join(tmpdir(), "kiln-postgres-"));
  const data = join(dir, "data");
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync("id", ["-u", "postgres"]).toString());
    const gid = Number(execFileSync("id", ["-g", "postgres"]).toString());
    chownSync(dir, uid, gid);
  }
  const port = await freePort();
  const pgCtl = postgresBinary("pg_ctl");
  let started = false;
  try {
    await runCommand(asPostgresUser([postgresBinary("initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]), { cwd: dir });
    const serverOptions = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
    await runCommand(asPostgresUser([pgCtl, "-D", data, "-l", join(dir, "server.log"), "-o", serverOptions, "-w", "-t", "30", "start"]), { cwd: dir });
    started = true;
    await runCommand(asPostgresUser([postgresBinary("createdb"), "-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "kiln"]), { cwd: dir });
  } catch (error) {
    if (started) await runCommand(asPostgresUser([pgCtl, "-D", data, "-m", "immediate", "-w", "stop"]), { cwd: dir }).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/kiln`,
    port,
    async stop() {
      await runCommand(asPostgresUser([pgCtl, "-D", data, "-m", "immediate", "-w", "stop"]), { cwd: dir }).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
