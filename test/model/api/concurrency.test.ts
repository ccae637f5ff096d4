/**
 * The real server under load: 64 concurrent streaming chat clients against `kiln serve` with 16
 * KV slots. Every stream must be complete and well formed, every greedy answer must be the same
 * request's answer run alone up to rounding (test/support/rounding.ts), memory must stay bounded,
 * and /metrics must show real batching with the queue drained afterwards. One `kiln serve` process
 * for the whole file.
 */
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHAT_PROMPTS, compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { beyondRounding, chatSteps, type TokenStep } from "../../support/rounding.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const MODEL = TEXT_SLUG;
const CLIENTS = 64;
const MAX_TOKENS = 24;

let server: RunningServer;
let root: string;

/** 64 different short prompts. */
const PROMPTS = Array.from({ length: CLIENTS }, (_, i) => {
  const base = CHAT_PROMPTS[i % CHAT_PROMPTS.length];
  const round = Math.floor(i / CHAT_PROMPTS.length);
  return round === 0 ? base : `${["Briefly: ", "Please answer: ", "Quick question. ", "In short, "][(round - 1) % 4]}${base}`;
});

const body = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: MODEL, messages: [{ role: "user", content }], temperature: 0, max_tokens: MAX_TOKENS, logprobs: true, top_logprobs: 5, ...extra });

const post = (path: string, payload: string) =>
  fetch(`${root}${path}`, { method: "POST", headers: { authorization: "Bearer sk-local", "content-type": "application/json" }, body: payload });

function rssKiB(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error("no VmRSS");
  return Number(m[1]);
}

async function metricsText(): Promise<string> {
  return (await fetch(`${root}/metrics`)).text();
}

function metric(text: string, name: string, extraLabels = ""): number | undefined {
  const prefix = `${name}{model="${MODEL}"${extraLabels}} `;
  const line = text.split("\n").find((l) => l.startsWith(prefix));
  return line === undefined ? undefined : Number(line.slice(prefix.length));
}

interface StreamResult {
  status: number;
  text: string;
  steps: TokenStep[];
  finishReason: string | null;
}

/** One streaming chat request, its SSE body parsed and checked for shape. */
async function streamChat(content: string): Promise<StreamResult> {
  const res = await post("/v1/chat/completions", body(content, { stream: true }));
  const raw = await res.text();
  if (res.status !== 200) return { status: res.status, text: raw, steps: [], finishReason: null };
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  expect(raw.endsWith("\n\n")).toBe(true);
  const blocks = raw.slice(0, -2).split("\n\n");
  for (const block of blocks) expect(block).toMatch(/^(data: [^\n]*|: [^\n]*)$/);
  const data = blocks.filter((b) => b.startsWith("data: ")).map((b) => b.slice("data: ".length));
  expect(data.at(-1)).toBe("[DONE]");
  expect(data.filter((d) => d === "[DONE]")).toHaveLength(1);
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Record<string, any>);
  for (const c of chunks) {
    expect(c.error).toBeUndefined();
    expect(c.object).toBe("chat.completion.chunk");
    expect(c.model).toBe(MODEL);
    expect(c.id).toBe(chunks[0].id);
  }
  const choices = chunks.flatMap((c) => c.choices as Array<Record<string, any>>);
  expect(choices.every((c) => c.index === 0)).toBe(true);
  expect(choices[0].delta.role).toBe("assistant");
  const last = choices.at(-1)!;
  expect(["stop", "length"]).toContain(last.finish_reason);
  expect(choices.slice(0, -1).every((c) => c.finish_reason === null)).toBe(true);
  const deltas = choices.slice(1, -1);
  expect(deltas.length).toBeGreaterThan(0);
  for (const d of deltas) expect(typeof d.delta.content).toBe("string");
  const steps = chatSteps(choices.flatMap((c) => c.logprobs?.content ?? []));
  return { status: 200, text: choices.map((c) => c.delta.content ?? "").join(""), steps, finishReason: last.finish_reason };
}

beforeAll(async () => {
  await compiledArtifact(); // compiled once and cached, so the server only loads it
  server = await startServer(MODEL, ["--max-running", "16", "--max-waiting", "64"]);
  root = server.root;
});

afterAll(async () => {
  expect(await stopServer(server), server?.stderr()).toBe(0);
});

describe("kiln serve under 64 concurrent streaming clients", () => {
  it("streams every request completely, matches solo greedy runs, stays bounded in memory and reports batching", async () => {
    expect(new Set(PROMPTS).size).toBe(CLIENTS);
    // Warm up (first-call costs) before the baseline memory reading.
    expect((await post("/v1/chat/completions", body("Hello!"))).status).toBe(200);
    const rssBefore = rssKiB(server.process.pid!);

    const streamed = await Promise.all(PROMPTS.map(streamChat));
    const rssAfter = rssKiB(server.process.pid!);
    for (const [i, r] of streamed.entries()) expect(r.status, `client ${i}: ${r.text}`).toBe(200);
    expect(streamed.every((r) => r.text.length > 0)).toBe(true);
    expect((rssAfter - rssBefore) / 1024).toBeLessThan(600);

    const metrics = await metricsText();
    expect(metric(metrics, "kiln_waiting_sequences")).toBe(0);
    expect(metric(metrics, "kiln_running_sequences")).toBe(0);
    expect(metric(metrics, "kiln_kv_slots")).toBe(16);
    const steps = metric(metrics, "kiln_batch_size_count")!;
    const single = metric(metrics, "kiln_batch_size_bucket", ',le="1"')!;
    expect(steps).toBeGreaterThan(0);
    expect(steps - single).toBeGreaterThan(0); // decode steps with more than one row
    expect(metric(metrics, "kiln_batch_size_bucket", ',le="8"')!).toBeLessThan(steps); // and some with more than 8
    expect(metric(metrics, "kiln_queue_time_seconds_count")).toBeGreaterThanOrEqual(CLIENTS);
    expect(metric(metrics, "kiln_engine_steps_total")!).toBeGreaterThanOrEqual(steps);
    expect(metric(metrics, "kiln_prefill_tokens_per_step_count")!).toBeGreaterThan(0);

    // The same requests run one at a time, not streamed: the same greedy answer up to rounding.
    let identical = 0;
    for (const [i, prompt] of PROMPTS.entries()) {
      const res = await post("/v1/chat/completions", body(prompt));
      expect(res.status).toBe(200);
      const alone = (await res.json()) as { choices: Array<{ message: { content: string }; finish_reason: string; logprobs: { content: any[] } }> };
      const aloneSteps = chatSteps(alone.choices[0].logprobs.content);
      expect(streamed[i].steps[0], `prompt ${i}: ${prompt}`).toEqual(aloneSteps[0]); // prefilled alone: the same first token
      expect(beyondRounding(aloneSteps, streamed[i].steps), `prompt ${i}: ${prompt}`).toBeNull();
      if (streamed[i].text === alone.choices[0].message.content) identical++;
    }
    console.log(`64 streamed answers identical to their solo run: ${identical}; the rest equal up to rounding`);
    expect(metric(await metricsText(), "kiln_running_sequences")).toBe(0);
  });

  it("returns per-token logprobs with sorted top alternatives that are a sub-distribution", async () => {
    const res = await post("/v1/chat/completions", body("Name three colors.", { logprobs: true, top_logprobs: 3 }));
    expect(res.status).toBe(200);
    const r = (await res.json()) as {
      choices: Array<{ logprobs: { content: Array<{ token: string; logprob: number; top_logprobs: Array<{ token: string; logprob: number }> }> } }>;
      usage: { completion_tokens: number };
    };
    const content = r.choices[0].logprobs.content;
    expect(content.length).toBe(r.usage.completion_tokens);
    for (const t of content) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs).toHaveLength(3);
      for (let k = 1; k < t.top_logprobs.length; k++) expect(t.top_logprobs[k].logprob).toBeLessThanOrEqual(t.top_logprobs[k - 1].logprob);
      for (const alt of t.top_logprobs) expect(alt.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs.reduce((s, alt) => s + Math.exp(alt.logprob), 0)).toBeLessThanOrEqual(1 + 1e-6);
      // Greedy: the chosen token is the most likely one.
      expect(t.logprob).toBeCloseTo(t.top_logprobs[0].logprob, 5);
    }
  });
});
