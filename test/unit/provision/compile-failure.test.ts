/** A compile that fails on a full disk reports ENOSPC, not the SQLite error of recording the failure. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { recordCompileFailure, recordCompileStart } from "../../../src/provision/compile-records.js";
import { recordedFailure } from "../../../src/provision/provision-artifact.js";

const homes: string[] = [];
afterEach(() => {
  for (const home of homes.splice(0)) rmSync(home, { recursive: true, force: true });
});

const enospc = () => Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", errno: -28, syscall: "write" });

describe("recording a failed compile", () => {
  it("keeps the compile's own error when the database cannot record it", () => {
    const home = mkdtempSync(join(tmpdir(), "kiln-enospc-"));
    homes.push(home);
    const db = openDatabase({ home });
    const id = recordCompileStart(db, "smollm2-135m-instruct", "test", {});
    // Fault injection: the database fails the way a full disk makes SQLite fail.
    const full = Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
    const failing = new Proxy(db, {
      get: (target, key) =>
        key === "prepare"
          ? () => {
              throw full;
            }
          : Reflect.get(target, key, target),
    });
    const cause = enospc();
    const reported = recordedFailure(cause, () => recordCompileFailure(failing, id, cause));
    expect(reported).toBe(cause);
    expect((reported as Error).message).toMatch(/^ENOSPC/);
    expect((reported as { code?: string }).code).toBe("ENOSPC");
    expect((reported as { recordError?: unknown }).recordError).toBe(full);
    db.close();
  });

  it("with a real SQLite error (a connection that is gone), still the compile's error", () => {
    const home = mkdtempSync(join(tmpdir(), "kiln-enospc-"));
    homes.push(home);
    const db = openDatabase({ home });
    const id = recordCompileStart(db, "smollm2-135m-instruct", "test", {});
    db.close();
    const cause = enospc();
    expect(() => recordCompileFailure(db, id, cause)).toThrow(); // what used to replace the cause
    expect(recordedFailure(cause, () => recordCompileFailure(db, id, cause))).toBe(cause);
  });

  it("records the failure when the database can", () => {
    const home = mkdtempSync(join(tmpdir(), "kiln-enospc-"));
    homes.push(home);
    const db = openDatabase({ home });
    const id = recordCompileStart(db, "smollm2-135m-instruct", "test", {});
    const cause = enospc();
    expect(recordedFailure(cause, () => recordCompileFailure(db, id, cause))).toBe(cause);
    expect(db.prepare("SELECT status, error FROM compiles WHERE id = ?").get(id)).toEqual({ status: "failed", error: cause.message });
    db.close();
  });
});
