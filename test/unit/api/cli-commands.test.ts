/** `kiln keys` and the argument handling of `kiln serve` (no model is loaded here). */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { hashKey } from "../../../src/api/auth/key-store.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import * as keys from "../../../src/cli/commands/keys.js";
import * as serve from "../../../src/cli/commands/serve.js";

function capture() {
  const out = { stdout: "", stderr: "" };
  const io = { stdout: { write: (s: string) => (out.stdout += s) }, stderr: { write: (s: string) => (out.stderr += s), isTTY: false } };
  return { out, io };
}

describe("kiln keys", () => {
  let home: string;
  let saved: string | undefined;
  beforeEach(() => {
    saved = process.env.KILN_HOME;
    home = mkdtempSync(join(tmpdir(), "kiln-keys-"));
    process.env.KILN_HOME = home;
  });
  afterEach(() => {
    process.env.KILN_HOME = saved;
    rmSync(home, { recursive: true, force: true });
  });

  it("creates a key (printed once), lists it without the key, and revokes it", async () => {
    const created = capture();
    expect(await keys.run(["create", "--name", "ci", "--models", "smollm2-135m-instruct,smollm2-360m-instruct"], created.io)).toBe(0);
    const key = created.out.stdout.trim();
    expect(key).toMatch(/^kiln-[A-Za-z0-9_-]{20,}$/);
    const db = openDatabase({ home });
    const row = db.prepare("SELECT id, key_hash, models_json FROM api_keys").get() as { id: string; key_hash: string; models_json: string };
    db.close();
    expect(row.key_hash).toBe(hashKey(key));
    expect(JSON.parse(row.models_json)).toEqual(["smollm2-135m-instruct", "smollm2-360m-instruct"]);

    const listed = capture();
    expect(await keys.run(["list"], listed.io)).toBe(0);
    expect(listed.out.stdout).toContain(row.id);
    expect(listed.out.stdout).toContain("ci");
    expect(listed.out.stdout).not.toContain(key);
    const json = capture();
    await keys.run(["list", "--json"], json.io);
    expect(JSON.parse(json.out.stdout)).toMatchObject([{ id: row.id, name: "ci", revokedAt: null }]);

    expect(await keys.run(["revoke", row.id], capture().io)).toBe(0);
    const again = capture();
    expect(await keys.run(["revoke", row.id], again.io)).toBe(1);
    const after = capture();
    await keys.run(["list", "--json"], after.io);
    expect(JSON.parse(after.out.stdout)[0].revokedAt).toMatch(/^\d{4}-/);
  });

  it("rejects bad arguments", async () => {
    for (const argv of [[], ["make"], ["create"], ["create", "--name", "x", "--models", "nope"], ["revoke"], ["list", "--bogus"]]) {
      const { io, out } = capture();
      expect(await keys.run(argv, io)).toBe(2);
      expect(out.stderr).toContain("kiln keys:");
    }
    const { io, out } = capture();
    expect(await keys.run(["--help"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln keys create/);
  });
});

describe("kiln serve arguments", () => {
  it("prints help", async () => {
    const { io, out } = capture();
    expect(await serve.run(["--help"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln serve --model <slug>/);
    for (const option of ["--port", "--host", "--cloud", "--threads"]) expect(out.stdout).toContain(option);
  });

  it("rejects missing or unknown models and bad options before doing anything", async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /which model/],
      [["--model"], /--model needs a slug/],
      [["--model", "gpt-9"], /unknown model: gpt-9/],
      [["--model", "whisper-tiny"], /transcription model/],
      [["--model", "smollm2-135m-instruct", "--port", "99999"], /--port/],
      [["--model", "smollm2-135m-instruct", "--threads", "0"], /--threads/],
      [["--model", "smollm2-135m-instruct", "--bogus"], /unknown argument --bogus/],
      [["--model", "smollm2-135m-instruct", "--log-level", "loud"], /--log-level/],
    ];
    for (const [argv, message] of cases) {
      const { io, out } = capture();
      expect(await serve.run(argv, io)).toBe(2);
      expect(out.stderr).toMatch(message);
    }
  });
});
