/**
 * `kiln batch` as a person runs it: a Batch API input file answered offline into an output file, one
 * line per request in the file's order, a refused request as its error line; each greedy answer is
 * what `kiln serve` answers the same request, up to rounding (test/support/rounding.ts). A file with a
 * bad line answers nothing, names the line, and exits 1.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHAT_PROMPTS, TEXT_SLUG } from "../../support/model.js";
import { beyondRounding, chatSteps } from "../../support/rounding.js";
import { KILN_BIN, startServer, stopServer, type RunningServer } from "../../support/server.js";

let dir: string;
let server: RunningServer;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "kiln-batch-"));
});
afterAll(async () => {
  await stopServer(server);
  rmSync(dir, { recursive: true, force: true });
});

function kilnBatch(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, [KILN_BIN, "batch", ...args], { timeout: 180_000 }, (error, stdout, stderr) =>
      done({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const chatBody = (content: string) => ({
  model: TEXT_SLUG,
  messages: [{ role: "user", content }],
  temperature: 0,
  max_tokens: 16,
  logprobs: true,
  top_logprobs: 5,
});

describe("kiln batch", () => {
  it("answers every request of a file in its order, each as kiln serve answers it", async () => {
    const prompts = CHAT_PROMPTS.slice(0, 4);
    const lines = prompts.map((p, i) => ({ custom_id: `q${i}`, method: "POST", url: "/v1/chat/completions", body: chatBody(p) }));
    lines.splice(2, 0, { custom_id: "empty", method: "POST", url: "/v1/chat/completions", body: { ...chatBody("x"), messages: [] } });
    const input = join(dir, "requests.jsonl");
    const output = join(dir, "answers.jsonl");
    writeFileSync(input, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const run = await kilnBatch([input, "-o", output]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain("completed: 4 answered, 1 failed, of 5");
    const answers = readFileSync(output, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(answers.map((a) => a.custom_id)).toEqual(lines.map((l) => l.custom_id));
    expect(answers[2].response).toMatchObject({ status_code: 400, body: { error: { param: "messages" } } });

    server = await startServer(TEXT_SLUG);
    for (const [i, prompt] of prompts.entries()) {
      const answer = answers.find((a) => a.custom_id === `q${i}`);
      expect(answer.response.status_code).toBe(200);
      const res = await fetch(`${server.baseURL}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(chatBody(prompt)),
      });
      const alone = (await res.json()) as { choices: Array<{ logprobs: { content: any } }> };
      expect(beyondRounding(chatSteps(alone.choices[0].logprobs.content), chatSteps(answer.response.body.choices[0].logprobs.content)), prompt).toBeNull();
    }
  });

  it("answers nothing for a file with a bad line, names the line, and exits 1", async () => {
    const input = join(dir, "bad.jsonl");
    writeFileSync(input, [JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/chat/completions", body: chatBody("hi") }), "{not json"].join("\n"));
    const run = await kilnBatch([input]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toMatch(/bad\.jsonl:2: This line is not valid JSON/);
  });
});
