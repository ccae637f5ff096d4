/**
 * An operator's `sqlite3 kiln.sqlite "select …"` while the server runs must not take the server's
 * WAL away: opening the database again in the same process (as `kiln serve` does for promotions
 * and compile records beside the cloud ledger's connection) must leave that connection's locks in
 * place, or the sqlite3 shell, taking itself for the last connection, checkpoints and deletes the
 * `-wal` and `-shm` files on closing, and the server's later writes go to a deleted WAL.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";

/** The sqlite3 shell (the Debian package sqlite3, which scripts/setup.sh installs). */
const hasSqlite3 = spawnSync("sqlite3", ["-version"]).status === 0;

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("kiln.sqlite beside an operator's sqlite3 shell", () => {
  it.skipIf(!hasSqlite3)("keeps the server's WAL, and its later writes visible, when the shell reads and exits", () => {
    const dir = mkdtempSync(join(tmpdir(), "kiln-db-locks-"));
    dirs.push(dir);
    const file = join(dir, "kiln.sqlite");
    const server = openDatabase({ path: file, seed: false });
    try {
      server.exec("CREATE TABLE ledger (id INTEGER PRIMARY KEY, nano_usd INTEGER NOT NULL)");
      const charge = server.prepare("INSERT INTO ledger (nano_usd) VALUES (?)");
      charge.run(100);
      // The same process opens the database again, and closes it.
      openDatabase({ path: file, seed: false }).close();
      const count = () => execFileSync("sqlite3", [file, "SELECT count(*) FROM ledger"]).toString().trim();
      expect(count()).toBe("1");
      expect(existsSync(`${file}-wal`)).toBe(true);
      expect(existsSync(`${file}-shm`)).toBe(true);
      charge.run(200);
      expect(count()).toBe("2");
    } finally {
      server.close();
    }
    // Everything reached the database file once the server closed.
    expect(execFileSync("sqlite3", [file, "SELECT sum(nano_usd) FROM ledger"]).toString().trim()).toBe("300");
  });
});
