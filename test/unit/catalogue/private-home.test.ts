/** KILN_HOME and kiln.sqlite are the owner's only: created so, and tightened when found open. */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { ensurePrivateHome } from "../../../src/catalogue/paths.js";
import { KEY_SECRET_FILE, loadKeySecret } from "../../../src/cloud/keys/key-secret.js";

const modeOf = (path: string) => statSync(path).mode & 0o777;

describe("private KILN_HOME", () => {
  let root: string;
  let savedUmask: number;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), "kiln-home-"));
    // The usual umask: on its own it would leave directories 0755 and files 0644.
    savedUmask = process.umask(0o022);
  });
  afterEach(() => {
    process.umask(savedUmask);
    rmSync(root, { recursive: true, force: true });
  });

  it("creates KILN_HOME 0700 and kiln.sqlite with its WAL files 0600, leaving the parents as they are", () => {
    const home = join(root, "parent", "kiln");
    const db = openDatabase({ home });
    try {
      expect(modeOf(home)).toBe(0o700);
      expect(modeOf(join(root, "parent"))).toBe(0o755);
      for (const file of ["kiln.sqlite", "kiln.sqlite-wal", "kiln.sqlite-shm"]) expect(modeOf(join(home, file)), file).toBe(0o600);
    } finally {
      db.close();
    }
  });

  it("tightens an existing home and database that others could read", () => {
    const home = join(root, "kiln");
    mkdirSync(join(home, "models"), { recursive: true });
    chmodSync(home, 0o755);
    openDatabase({ home }).close();
    chmodSync(home, 0o755);
    for (const file of ["kiln.sqlite", "kiln.sqlite-wal", "kiln.sqlite-shm"]) writeFileSync(join(home, file), "", { flag: "a", mode: 0o644 });
    chmodSync(join(home, "kiln.sqlite"), 0o644);
    const db = openDatabase({ home });
    try {
      expect(modeOf(home)).toBe(0o700);
      for (const file of ["kiln.sqlite", "kiln.sqlite-wal", "kiln.sqlite-shm"]) expect(modeOf(join(home, file)), file).toBe(0o600);
    } finally {
      db.close();
    }
  });

  it("leaves a directory that holds more than kiln's things as it is, but still makes the database private", () => {
    const shared = join(root, "shared");
    mkdirSync(shared, { mode: 0o755 });
    writeFileSync(join(shared, "notes.txt"), "not kiln's");
    ensurePrivateHome(shared);
    expect(modeOf(shared)).toBe(0o755);
    const db = openDatabase({ home: shared });
    db.close();
    expect(modeOf(shared)).toBe(0o755);
    expect(modeOf(join(shared, "kiln.sqlite"))).toBe(0o600);
  });

  it("never tightens a shared sticky directory such as /tmp", () => {
    const sticky = join(root, "tmp");
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    ensurePrivateHome(sticky);
    expect(statSync(sticky).mode & 0o7777).toBe(0o1777);
  });

  it("tightens a home made by mkdir (0755) whose first use is the key secret (kiln keys create)", () => {
    const home = join(root, "kiln");
    mkdirSync(home, { mode: 0o755 });
    expect(modeOf(home)).toBe(0o755);
    loadKeySecret({ env: { KILN_HOME: home } });
    expect(modeOf(home)).toBe(0o700);
    expect(modeOf(join(home, KEY_SECRET_FILE))).toBe(0o600);
    // And a home left 0755 holding the secret and the database is still kiln's own to tighten.
    chmodSync(home, 0o755);
    openDatabase({ home }).close();
    writeFileSync(join(home, "usage-spool-host-8000.jsonl"), "", { mode: 0o600 });
    chmodSync(home, 0o755);
    openDatabase({ home }).close();
    expect(modeOf(home)).toBe(0o700);
  });
});
