/**
 * A GGUF file on this machine serves as llama.cpp and Ollama users expect: `kiln serve --model
 * ./My-Model.Q4_K_M.gguf` (relative to the server's directory) compiles it, lists it on /v1/models
 * under a slug made from its file name and answers chats by that slug over real HTTP; `kiln run` and
 * `kiln compile` take the same path; a file that is not a GGUF, or a GGUF of an architecture kiln
 * has no graph for, is one line naming the file and why. The weights are random (a tiny synthetic
 * llama with a 16-token vocabulary), so the answers' shape and counts are checked, not their words.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { meta, writeGguf } from "../../fixtures/gguf/write-gguf.js";
import { KILN_BIN, type RunningServer, startServer, stopServer } from "../../support/server.js";
import { writeTinyGguf } from "../../unit/provision/tiny-gguf.js";

const run = promisify(execFile);
const FILE = "My-Model.Q4_K_M.gguf";
const SLUG = "my-model-q4_k_m";

let dir: string;
let server: RunningServer | undefined;

/** `kiln <args>` in the fixture folder: its exit code and output. */
async function kiln(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [KILN_BIN, ...args], { cwd: dir, env: process.env });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "kiln-local-gguf-"));
  await writeTinyGguf(join(dir, FILE), 7);
  writeFileSync(join(dir, "notes.gguf"), "not weights, only a text file\n");
  await writeGguf(join(dir, "mamba-tiny.gguf"), { metadata: [["general.architecture", meta.str("mamba")]] });
  server = await startServer(`./${FILE}`, ["--max-running", "2"], { cwd: dir });
}, 300_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
  rmSync(dir, { recursive: true, force: true });
});

describe("kiln serve --model ./file.gguf", () => {
  it("lists the file's slug as a served local file with its path", async () => {
    const res = await fetch(`${server!.baseURL}/models`);
    const { data } = (await res.json()) as { data: Array<Record<string, unknown>> };
    const local = data.find((m) => m.id === SLUG);
    expect(local).toMatchObject({ id: SLUG, object: "model", owned_by: "local-file", kind: "text", status: "serving", availability: "served" });
    expect(local!.local_path).toBe(join(dir, FILE));
    expect(local!.context_length).toBeGreaterThan(0);
    const one = await (await fetch(`${server!.baseURL}/models/${SLUG}`)).json();
    expect(one).toMatchObject({ id: SLUG, owned_by: "local-file" });
  });

  it("answers a chat by the slug: one choice, the slug as model, consistent usage", async () => {
    const res = await fetch(`${server!.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: SLUG, messages: [{ role: "user", content: "abc" }], max_tokens: 6, temperature: 0 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as {
      object: string;
      model: string;
      choices: Array<{ message: { role: string; content: string }; finish_reason: string }>;
      usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
    };
    expect(body.object).toBe("chat.completion");
    expect(body.model).toBe(SLUG);
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0].message.role).toBe("assistant");
    expect(typeof body.choices[0].message.content).toBe("string");
    expect(["stop", "length"]).toContain(body.choices[0].finish_reason);
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(6);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + body.usage.completion_tokens);
  });
});

describe("kiln run and kiln compile with a file", () => {
  it("kiln compile ./file.gguf reuses the artifact the server built, by the file's content", async () => {
    const { code, stdout } = await kiln(["compile", `./${FILE}`]);
    expect(code).toBe(0);
    expect(stdout).toMatch(new RegExp(`^${SLUG}-[0-9a-f]{12} already compiled\\n`));
  });

  it("kiln compile --device webgpu builds the GPU target beside the CPU artifact, and reuses it after", async () => {
    const cpu = await kiln(["compile", `./${FILE}`]);
    const built = await kiln(["compile", `./${FILE}`, "--device", "webgpu"]);
    expect(built.code, built.stderr).toBe(0);
    const id = new RegExp(`^(${SLUG}-[0-9a-f]{12}) (already compiled|compiled in [0-9.]+ s)\n`);
    expect(built.stdout).toMatch(id);
    expect(id.exec(built.stdout)![1]).not.toBe(id.exec(cpu.stdout)![1]);
    const again = await kiln(["compile", `./${FILE}`, "--device", "webgpu"]);
    expect(again.stdout).toBe(built.stdout.replace(/compiled in [0-9.]+ s/, "already compiled"));
  });

  it("kiln run --model ./file.gguf generates", async () => {
    const { code, stderr } = await kiln(["run", "--model", `./${FILE}`, "--max-tokens", "4", "--temperature", "0", "abc"]);
    expect(code, stderr).toBe(0);
  });

  it("a file that is not a GGUF is one line naming it", async () => {
    const { code, stderr } = await kiln(["serve", "--model", "./notes.gguf", "--port", "0", "--no-nightly"]);
    expect(code).toBe(1);
    expect(stderr).toBe('kiln serve: ./notes.gguf: not a GGUF file: expected magic "GGUF" (47 47 55 46), found 6e 6f 74 20\n');
  });

  it("a GGUF of an architecture without a graph builder is one line naming it and the architecture", async () => {
    const { code, stderr } = await kiln(["compile", "mamba-tiny.gguf"]);
    expect(code).toBe(1);
    expect(stderr.trim().split("\n")).toHaveLength(1);
    expect(stderr).toMatch(/^kiln compile: mamba-tiny\.gguf: cannot serve it: architecture "mamba" is not supported/);
  });

  it("a missing file is one line naming it", async () => {
    const { code, stderr } = await kiln(["run", "./absent.gguf", "hello"]);
    expect(code).toBe(1);
    expect(stderr).toBe("kiln run: ./absent.gguf: no such file\n");
  });
});
