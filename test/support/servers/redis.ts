/**
 * A real Redis server for tests (Debian's `redis-server`, installed by scripts/setup.sh): on a free
 * port of 127.0.0.1, working directory a new temporary directory, no persistence.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./free-port.js";
import { startBackground, waitForPort } from "./process.js";

export interface RunningRedis {
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

export async function startRedis(): Promise<RunningRedis> {
  const dir = mkdtempSync(join(tmpdir(), "kiln-redis-"));
  const port = await freePort();
  const server = startBackground(["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no"], {
    cwd: dir,
  });
  const stop = async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitForPort(port, () => server.child.exitCode === null);
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}\n${server.output()}`);
  }
  return { url: `redis://127.0.0.1:${port}`, port, stop };
}
