/**
 * The Batch API on the real model and server, through the official openai client: a file of chat
 * requests uploaded, run as a batch, its output file read back. Each greedy answer is the same
 * request's answer sent alone, up to rounding (test/support/rounding.ts: requests run side by side
 * may part where two tokens nearly tie). A batch of embeddings gives the vectors /v1/embeddings
 * gives. A server stopped mid-batch leaves it unfinished, and the next server over the same
 * KILN_HOME finishes it, every request answered once.
 */
import OpenAI, { toFile } from "openai";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { SqliteBatchStore } from "../../../src/catalogue/stored-batches.js";
import { CHAT_PROMPTS, TEXT_SLUG } from "../../support/model.js";
import { beyondRounding, chatSteps } from "../../support/rounding.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const FINAL = ["completed", "failed", "cancelled", "expired"];

let server: RunningServer | undefined;

/** Batches this file made: any left unfinished by a failing test is cancelled, so that no later server over the same KILN_HOME resumes it, and their files deleted. */
const made: string[] = [];

afterAll(async () => {
  if (server) {
    const client = clientOf(server);
    for (const id of made) {
      const batch = await client.batches.cancel(id).catch(() => undefined);
      for (const file of [batch?.input_file_id, batch?.output_file_id, batch?.error_file_id]) if (file) await client.files.delete(file).catch(() => undefined);
    }
  }
  await stopServer(server);
});

/** The file's server, started by whichever test comes first. */
async function running(): Promise<RunningServer> {
  server ??= await startServer(TEXT_SLUG);
  return server;
}

function clientOf(running: RunningServer): OpenAI {
  return new OpenAI({ baseURL: running.baseURL, apiKey: "local" });
}

async function uploadLines(client: OpenAI, lines: object[]) {
  const content = Buffer.from(lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  return client.files.create({ file: await toFile(content, "requests.jsonl"), purpose: "batch" });
}

async function settled(client: OpenAI, id: string, timeoutMs = 60_000) {
  made.push(id);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (FINAL.includes(batch.status) || Date.now() > deadline) return batch;
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function outputLines(client: OpenAI, fileId: string | null | undefined): Promise<any[]> {
  expect(fileId).toBeTruthy();
  const text = await (await client.files.content(fileId!)).text();
  return text
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
}

const chatBody = (content: string, maxTokens = 16) => ({
  model: TEXT_SLUG,
  messages: [{ role: "user", content }],
  temperature: 0,
  max_tokens: maxTokens,
  logprobs: true,
  top_logprobs: 5,
});

describe("Batch API on the real model", () => {
  it("answers each chat request of a batch as the same request alone, and its usage is theirs summed", async () => {
    const client = clientOf(await running());
    const prompts = CHAT_PROMPTS.slice(0, 6);
    const file = await uploadLines(
      client,
      prompts.map((p, i) => ({ custom_id: `q${i}`, method: "POST", url: "/v1/chat/completions", body: chatBody(p) })),
    );
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const batch = await settled(client, created.id);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    expect(batch.error_file_id).toBeNull();
    expect(batch.model).toBe(TEXT_SLUG);
    const lines = await outputLines(client, batch.output_file_id);
    expect(lines.map((l) => l.custom_id)).toEqual(prompts.map((_, i) => `q${i}`));
    let output = 0;
    for (const [i, prompt] of prompts.entries()) {
      const alone = await client.chat.completions.create(chatBody(prompt) as OpenAI.ChatCompletionCreateParamsNonStreaming);
      const inBatch = lines[i].response.body;
      expect(lines[i].response.status_code).toBe(200);
      expect(beyondRounding(chatSteps(alone.choices[0].logprobs!.content as any), chatSteps(inBatch.choices[0].logprobs.content)), prompt).toBeNull();
      output += inBatch.usage.completion_tokens;
    }
    expect(batch.usage?.output_tokens).toBe(output);
    expect(batch.usage?.input_tokens).toBe(lines.reduce((s, l) => s + l.response.body.usage.prompt_tokens, 0));
  });

  it("a batch of embeddings gives the vectors /v1/embeddings gives", async () => {
    const client = clientOf(await running());
    const texts = ["The cat sat on the mat.", "Quarterly revenue rose 5%.", "hello"];
    const file = await uploadLines(
      client,
      texts.map((t, i) => ({ custom_id: `e${i}`, method: "POST", url: "/v1/embeddings", body: { model: TEXT_SLUG, input: t } })),
    );
    const batch = await settled(client, (await client.batches.create({ input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" })).id);
    expect(batch.status).toBe("completed");
    const lines = await outputLines(client, batch.output_file_id);
    const direct = await client.embeddings.create({ model: TEXT_SLUG, input: texts, encoding_format: "float" });
    for (const [i, line] of lines.entries()) {
      const a = line.response.body.data[0].embedding as number[];
      const b = direct.data[i].embedding;
      const cosine = a.reduce((s, v, j) => s + v * b[j], 0);
      expect(cosine, texts[i]).toBeGreaterThan(0.999);
    }
  });

  it("a server stopped mid-batch leaves it unfinished, and the next one over the same KILN_HOME finishes it", async () => {
    let client = clientOf(await running());
    const count = 24;
    const file = await uploadLines(
      client,
      Array.from({ length: count }, (_, i) => ({
        custom_id: `c${i}`,
        method: "POST",
        url: "/v1/completions",
        body: { model: TEXT_SLUG, prompt: `Count from ${i}:`, max_tokens: 24, temperature: 0, ignore_eos: true },
      })),
    );
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/completions", completion_window: "24h" });
    let seen = created;
    while ((seen.request_counts?.completed ?? 0) < 2) {
      await new Promise((r) => setTimeout(r, 100));
      seen = await client.batches.retrieve(created.id);
    }
    expect(await stopServer(server)).toBe(0);
    const db = openDatabase();
    const left = (await new SqliteBatchStore(db).get(created.id, null))!;
    db.close();
    expect(left.status).toBe("in_progress");
    const done = (left.request_counts as { completed: number }).completed;
    expect(done).toBeGreaterThanOrEqual(2);
    expect(done).toBeLessThan(count);
    server = await startServer(TEXT_SLUG);
    client = clientOf(server);
    const batch = await settled(client, created.id);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: count, completed: count, failed: 0 });
    const lines = await outputLines(client, batch.output_file_id);
    expect(lines.map((l) => l.custom_id)).toEqual(Array.from({ length: count }, (_, i) => `c${i}`));
    expect(lines.every((l) => l.response.body.usage.completion_tokens === 24)).toBe(true);
    expect((await client.files.delete(file.id)).deleted).toBe(true);
    await expect(client.files.retrieve(file.id)).rejects.toMatchObject({ status: 404 });
  });
});
