/**
 * kiln is a product people install: it serves when started from another directory, and when
 * installed as a package (`npm pack`, then `npm install -g` into a temporary prefix) and started
 * through the `kiln` executable that the install puts on the PATH (running the JavaScript compiled
 * at packing, where a checkout runs its TypeScript sources).
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, stopServer, type HowToStart, type RunningServer } from "../../support/server.js";

const run = promisify(execFile);

const MODEL = "smollm2-135m-instruct";

/** Starts a server the given way, asks it one chat question without an Authorization header, fetches the console's script (bundled from the packed sources), and stops it. */
async function answerOnce(how: HowToStart): Promise<{ models: string[]; content: string; consoleScript: number; exit: number | null | "timeout" }> {
  let server: RunningServer | undefined;
  try {
    server = await startServer(MODEL, ["--max-running", "1"], how);
    const models = (await (await fetch(`${server.baseURL}/models`)).json()) as { data: { id: string }[] };
    const res = await fetch(`${server.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hello." }], max_tokens: 8, temperature: 0 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { choices: { message: { content: string } }[] };
    // A constrained answer: the grammar thread starts from wherever kiln's files are, too.
    const json = await fetch(`${server.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: "user", content: "A JSON object, please." }],
        max_tokens: 8,
        response_format: { type: "json_object" },
      }),
    });
    expect(json.status, await json.clone().text()).toBe(200);
    expect(((await json.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content).toMatch(/^\{/);
    const script = await fetch(`${server.root}/console/app.js`);
    expect(script.status, await script.clone().text()).toBe(200);
    const consoleScript = (await script.text()).length;
    return { models: models.data.map((m) => m.id), content: body.choices[0].message.content, consoleScript, exit: await stopServer(server) };
  } finally {
    await stopServer(server);
  }
}

describe("kiln runs from anywhere", () => {
  const scratch = mkdtempSync(join(tmpdir(), "kiln-anywhere-"));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it("serves when started from another directory", async () => {
    const answer = await answerOnce({ cwd: scratch });
    expect(answer.models).toContain(MODEL);
    expect(answer.content.length).toBeGreaterThan(0);
    expect(answer.exit).toBe(0);
  });

  describe("installed as a package", () => {
    const prefix = join(scratch, "prefix");
    beforeAll(async () => {
      const packed = (await run("npm", ["pack", "--pack-destination", scratch, "--silent"])).stdout.trim().split("\n").pop()!;
      // The package's own dependencies come from the npm cache that this checkout's install filled;
      // onnxruntime-node's optional GPU download is skipped as in the checkout (its .npmrc is not packed).
      await run("npm", ["install", "-g", "--prefix", prefix, "--prefer-offline", "--no-audit", "--no-fund", join(scratch, packed)], {
        env: { ...process.env, ONNXRUNTIME_NODE_INSTALL: "skip" },
        maxBuffer: 64 << 20,
      });
    }, 600_000);

    it("packs only what kiln needs to run", async () => {
      const listing = JSON.parse((await run("npm", ["pack", "--dry-run", "--json", "--silent"])).stdout) as { files: { path: string }[] }[];
      const tops = new Set(listing[0].files.map((f) => f.path.split("/")[0]));
      // The JavaScript that `prepack` compiles, not the TypeScript sources (bin/kiln.mjs runs whichever is there).
      expect(tops).toContain("dist");
      expect(tops).not.toContain("src");
      expect(listing[0].files.map((f) => f.path)).toContain("dist/cli/kiln.js");
      expect(tops).toContain("models.sqlite.sql");
      expect(tops).toContain("console");
      expect(tops).not.toContain("test");
      expect(tops).not.toContain("bench");
    });

    it("serves through the installed `kiln` executable, from another directory", async () => {
      const answer = await answerOnce({ kiln: [join(prefix, "bin", "kiln")], cwd: scratch });
      expect(answer.models).toContain(MODEL);
      expect(answer.content.length).toBeGreaterThan(0);
      expect(answer.consoleScript).toBeGreaterThan(10_000);
      expect(answer.exit).toBe(0);
    });
  });
});
