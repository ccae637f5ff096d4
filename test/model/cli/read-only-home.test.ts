/**
 * A read-only KILN_HOME, as a fleet's shared home may be: `kiln serve` serves the models pulled and
 * compiled there, reading its database as it is, and writes nothing there. The home is mounted
 * read-only in a mount namespace of the server's own (as root), else its files lose their write
 * bits (a user other than root cannot write them then).
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { kilnHome } from "../../../src/catalogue/paths.js";
import { pullModel } from "../../../src/catalogue/pull/index.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { KILN_BIN, type RunningServer, startServer, stopServer } from "../../support/server.js";

const asRoot = process.getuid?.() === 0;
let home: string;
let server: RunningServer | undefined;

/** Every path under `dir` with its modification time, to show that nothing was written. */
function snapshot(dir: string): Map<string, number> {
  const out = new Map<string, number>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      const s = statSync(path);
      out.set(path, s.mtimeMs);
      if (s.isDirectory()) walk(path);
    }
  };
  walk(dir);
  return out;
}

beforeAll(async () => {
  await pullModel(TEXT_SLUG);
  const artifact = await compiledArtifact();
  // A home of its own inside the test home (the same file system): the text model pulled and compiled, and a database closed cleanly (no -wal, no -shm).
  home = mkdtempSync(join(kilnHome(), "read-only-home-"));
  cpSync(join(kilnHome(), "models", TEXT_SLUG), join(home, "models", TEXT_SLUG), { recursive: true });
  cpSync(artifact.dir, join(home, "artifacts", TEXT_SLUG, artifact.manifest.id), { recursive: true });
  openDatabase({ home }).close();
  if (!asRoot) execFileSync("chmod", ["-R", "a-w", home]);
}, 600_000);

afterAll(async () => {
  await stopServer(server);
  if (home) {
    if (!asRoot) execFileSync("chmod", ["-R", "u+w", home]);
    rmSync(home, { recursive: true, force: true });
  }
});

describe("kiln serve with a read-only KILN_HOME", () => {
  it("serves the model pulled and compiled there, and writes nothing there", async () => {
    const before = snapshot(home);
    const readOnly = asRoot
      ? [
          "unshare",
          "-m",
          "sh",
          "-c",
          'mount --bind "$KILN_HOME" "$KILN_HOME" && mount -o remount,bind,ro "$KILN_HOME" && exec "$@"',
          "sh",
          process.execPath,
          KILN_BIN,
        ]
      : undefined;
    const previous = process.env.KILN_HOME;
    process.env.KILN_HOME = home;
    try {
      server = await startServer(TEXT_SLUG, [], { kiln: readOnly });
    } finally {
      process.env.KILN_HOME = previous;
    }
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: "test", maxRetries: 0 });
    const answer = await client.chat.completions.create({
      model: TEXT_SLUG,
      messages: [{ role: "user", content: "Name three primary colors." }],
      max_tokens: 12,
      temperature: 0,
    });
    expect(answer.choices[0].message.content).toMatch(/red|blue|yellow/i);
    // Stored responses live in memory then: kept and continued all the same, written nowhere.
    const first = await client.responses.create({ model: TEXT_SLUG, input: "Hi", max_output_tokens: 4, temperature: 0 });
    expect((await client.responses.retrieve(first.id)).id).toBe(first.id);
    const next = await client.responses.create({ model: TEXT_SLUG, previous_response_id: first.id, input: "Again", max_output_tokens: 4, temperature: 0 });
    expect(next.previous_response_id).toBe(first.id);
    expect(server.stderr()).not.toMatch(/failed to load/);
    // The promotions were read from the database as it is.
    expect(server.stderr()).not.toMatch(/cannot (open|read)[^\n]*database/);
    expect(await stopServer(server)).toBe(0);
    expect(snapshot(home)).toEqual(before);
  }, 300_000);
});
