/**
 * Text on the WebGPU device, end to end: the real `kiln serve --device webgpu` with SmolLM2-135M over
 * HTTP, on this machine's adapter (Mesa's lavapipe where there is no GPU, about 100x slower than the
 * CPU provider: a prefill of a short prompt takes 10-30 s and a decode step about 1 s, so every
 * request here is a few tokens), against the same requests on a `--device cpu` server.
 *
 * The two servers run different graphs: the CPU's default rounds each matmul input to int8 blocks,
 * the GPU's computes in float32 (the GPU graph's mean KL to the exact-numerics reference measured
 * 0.003, the CPU default's 0.005). That rounding moves a likely token's log-probability by 0.1-0.2
 * nats, so greedy tokens agree wherever the CPU's best token leads its second by more than
 * ROUNDING_MARGIN, and prompt log-probabilities agree within SCORING; a wrong position, a stale
 * cache or a lossy read-back moves them by nats.
 *
 * An embedding (the last position's final hidden state, the one the device brings back) is the CPU
 * server's within that rounding too.
 *
 * Without a WebGPU adapter the file fails, saying so: it never skips.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

/** Nats: a CPU step whose best token leads its second by more than this cannot flip on the GPU (see above). */
const ROUNDING_MARGIN = 0.5;
/**
 * Prompt scoring, GPU against CPU, in nats: each token's |difference| at most `abs + rel * |CPU's
 * log-probability|`, and their mean at most `mean`. The difference is the CPU graph's int8 rounding:
 * on this prompt the GPU's log-probabilities equal those of the CPU's float32 graph (accuracy level
 * 0) to 1e-3, while the default graph's move from the exact reference by up to 0.78 nats on the
 * unlikely second token (-19 nats: 4%), 0.1-0.2 on likely ones, and 0.22 nats from the GPU's on
 * average. A position scored against its neighbour's logits would be off by several nats.
 */
const SCORING = { abs: 0.25, rel: 0.05, mean: 0.4 };

const CHAT = {
  model: TEXT_SLUG,
  messages: [{ role: "user", content: "What is the capital city of France? Answer in one word." }],
  max_tokens: 8,
  temperature: 0,
  logprobs: true,
  top_logprobs: 2,
};
const SCORED = {
  model: TEXT_SLUG,
  prompt: "The lighthouse keeper kept two notebooks: one for the weather and one for the ships.",
  echo: true,
  logprobs: 2,
  prompt_logprobs: 2,
  max_tokens: 1,
  temperature: 0,
};

type PromptLogprobs = Array<Record<string, { logprob: number; rank: number | null; decoded_token: string }> | null>;

interface ChatAnswer {
  object: string;
  model: string;
  choices: Array<{
    index: number;
    message: { role: string; content: string };
    finish_reason: string;
    logprobs: { content: Array<{ token: string; logprob: number; top_logprobs: Array<{ token: string; logprob: number }> }> };
  }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

interface CompletionAnswer {
  choices: Array<{
    text: string;
    finish_reason: string;
    logprobs: { tokens: string[]; token_logprobs: Array<number | null>; top_logprobs: Array<Record<string, number> | null> };
  }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

async function post<T>(s: RunningServer, path: string, body: object): Promise<T> {
  const res = await fetch(`${s.baseURL}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`POST ${path}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

const EMBED = { model: TEXT_SLUG, input: "Paris is the capital of France." };
interface EmbeddingAnswer {
  data: Array<{ embedding: number[] }>;
  usage: { prompt_tokens: number };
}

/** The CPU server's answers to the same requests: the reference. */
let cpu: { chat: ChatAnswer; scored: CompletionAnswer; embedded: EmbeddingAnswer; model: { device?: string } };
let gpu: RunningServer | undefined;
let adapter: string | undefined;
let gpuChat: ChatAnswer | undefined;

beforeAll(async () => {
  // One server at a time: the CPU reference would otherwise take cores from lavapipe.
  const reference = await startServer(TEXT_SLUG, ["--device", "cpu"]);
  try {
    cpu = {
      chat: await post<ChatAnswer>(reference, "/chat/completions", CHAT),
      scored: await post<CompletionAnswer>(reference, "/completions", SCORED),
      embedded: await post<EmbeddingAnswer>(reference, "/embeddings", EMBED),
      model: (await (await fetch(`${reference.baseURL}/models/${TEXT_SLUG}`)).json()) as { device?: string },
    };
  } finally {
    expect(await stopServer(reference)).toBe(0);
  }
  try {
    gpu = await startServer(TEXT_SLUG, ["--device", "webgpu"]);
  } catch (err) {
    const message = (err as Error).message;
    if (/no WebGPU adapter/.test(message))
      throw new Error(
        `no WebGPU adapter: these tests need one; on a machine without a GPU install Mesa's lavapipe (scripts/setup.sh) or set VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json\n${message}`,
      );
    throw err;
  }
  adapter = /models on webgpu on ([^;)]+?)(?: \(software, on the CPU\))?\); /.exec(gpu.stderr())?.[1];
}, 600_000);

afterAll(async () => {
  if (gpu) expect(await stopServer(gpu)).toBe(0);
});

describe("text on the WebGPU device", () => {
  it("answers a chat completion with the CPU server's greedy tokens", async () => {
    const t0 = performance.now();
    const answer = await post<ChatAnswer>(gpu!, "/chat/completions", CHAT);
    const seconds = (performance.now() - t0) / 1000;
    gpuChat = answer;
    const [choice] = answer.choices;
    console.log(`webgpu on ${adapter}: "${choice.message.content}" in ${seconds.toFixed(1)} s (CPU: "${cpu.chat.choices[0].message.content}")`);

    expect(answer).toMatchObject({ object: "chat.completion", model: TEXT_SLUG });
    expect(answer.choices).toHaveLength(1);
    expect(choice).toMatchObject({ index: 0, message: { role: "assistant", content: expect.any(String) } });
    expect(["stop", "length"]).toContain(choice.finish_reason);
    const steps = choice.logprobs.content;
    expect(steps.length).toBeGreaterThan(0);
    expect(steps.length).toBeLessThanOrEqual(CHAT.max_tokens);
    if (choice.finish_reason === "length") expect(steps).toHaveLength(CHAT.max_tokens);
    expect(answer.usage).toMatchObject({
      prompt_tokens: cpu.chat.usage.prompt_tokens, // the same template and tokenizer
      completion_tokens: steps.length,
      total_tokens: cpu.chat.usage.prompt_tokens + steps.length,
    });
    for (const step of steps) {
      expect(step.logprob).toBeLessThanOrEqual(0);
      expect(step.top_logprobs).toHaveLength(2);
      expect(step.top_logprobs[0]).toMatchObject({ token: step.token, logprob: expect.closeTo(step.logprob, 4) }); // greedy: the best
    }

    // The reference's choices are clear of rounding, so the device must make the same ones.
    const reference = cpu.chat.choices[0].logprobs.content;
    console.log(
      `CPU margins of best over second (nats): ${reference.map((s) => (s.top_logprobs[0].logprob - s.top_logprobs[1].logprob).toFixed(2)).join(" ")}`,
    );
    for (const step of reference) expect(step.top_logprobs[0].logprob - step.top_logprobs[1].logprob, step.token).toBeGreaterThan(ROUNDING_MARGIN);
    expect(steps.map((s) => s.token)).toEqual(reference.map((s) => s.token));
    expect(choice.message.content).toBe(cpu.chat.choices[0].message.content);
    expect(choice.message.content).toMatch(/Paris/);
    expect(choice.finish_reason).toBe(cpu.chat.choices[0].finish_reason);
  }, 300_000);

  it("keeps the end token out on the device with ignore_eos: the answer goes on to its budget", async () => {
    // The CPU's answer ends with its end token; the device's must run past it.
    expect(cpu.chat.choices[0].message.content).toMatch(/Paris\.$/);
    const answer = await post<ChatAnswer>(gpu!, "/chat/completions", { ...CHAT, logprobs: false, top_logprobs: undefined, max_tokens: 10, ignore_eos: true });
    expect(answer.choices[0].finish_reason).toBe("length");
    expect(answer.usage.completion_tokens).toBe(10);
    expect(answer.choices[0].message.content.startsWith(cpu.chat.choices[0].message.content)).toBe(true);
    expect(answer.choices[0].message.content.length).toBeGreaterThan(cpu.chat.choices[0].message.content.length);
  }, 300_000);

  it("keeps a bad word out on the device: the same answer up to it, then another token", async () => {
    const content = cpu.chat.choices[0].message.content;
    const before = content.slice(0, content.indexOf("Paris"));
    expect(before.length).toBeGreaterThan(0);
    const answer = await post<ChatAnswer>(gpu!, "/chat/completions", {
      ...CHAT,
      logprobs: false,
      top_logprobs: undefined,
      max_tokens: 10,
      bad_words: ["Paris"],
    });
    const text = answer.choices[0].message.content;
    expect(text.startsWith(before), text).toBe(true);
    expect(text.slice(before.length).startsWith("Paris"), text).toBe(false);
  }, 300_000);

  it("streams the same answer as server-sent events, ending with [DONE]", async () => {
    expect(gpuChat, "the non-streamed answer").toBeDefined();
    const res = await fetch(`${gpu!.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...CHAT, logprobs: false, top_logprobs: undefined, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = (await res.text())
      .split("\n\n")
      .map((e) => e.trim())
      .filter((e) => e !== "");
    for (const e of events) expect(e).toMatch(/^data: /);
    const data = events.map((e) => e.slice("data: ".length));
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    for (const c of chunks) expect(c).toMatchObject({ object: "chat.completion.chunk", model: TEXT_SLUG });
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    expect(text).toBe(gpuChat!.choices[0].message.content);
    const finishes = chunks.map((c) => c.choices[0]?.finish_reason).filter((f) => f != null);
    expect(finishes).toEqual([gpuChat!.choices[0].finish_reason]);
    // With include_usage the last chunk carries the usage and no choice.
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: gpuChat!.usage });
  }, 300_000);

  it("scores a prompt (completions with echo and logprobs) as the CPU server does, within rounding", async () => {
    const answer = await post<CompletionAnswer>(gpu!, "/completions", SCORED);
    const want = cpu.scored.choices[0].logprobs;
    const got = answer.choices[0].logprobs;
    const n = cpu.scored.usage.prompt_tokens;
    expect(answer.usage).toEqual(cpu.scored.usage);
    expect(answer.choices[0].text.startsWith(SCORED.prompt)).toBe(true);
    expect(got.tokens).toEqual(want.tokens.slice(0, got.tokens.length));
    expect(got.tokens).toHaveLength(n + 1); // the prompt's tokens, then the one generated
    expect(got.token_logprobs[0]).toBeNull(); // nothing precedes the first token
    expect(got.top_logprobs[0]).toBeNull();
    let sum = 0;
    let largest = 0;
    for (let p = 1; p < n; p++) {
      const d = Math.abs(got.token_logprobs[p]! - want.token_logprobs[p]!);
      sum += d;
      largest = Math.max(largest, d);
      expect(d, `position ${p} (${got.tokens[p]}): ${got.token_logprobs[p]} on webgpu, ${want.token_logprobs[p]} on the CPU`).toBeLessThanOrEqual(
        SCORING.abs + SCORING.rel * Math.abs(want.token_logprobs[p]!),
      );
      expect(Object.keys(got.top_logprobs[p]!).length, `position ${p}`).toBeGreaterThanOrEqual(1);
      expect(Object.keys(got.top_logprobs[p]!).length, `position ${p}`).toBeLessThanOrEqual(2);
    }
    // vLLM's prompt_logprobs: the same log probabilities; a rank where the device's top alternatives hold the token, else null.
    const ids = (answer.choices[0] as unknown as { prompt_logprobs: PromptLogprobs }).prompt_logprobs;
    const cpuIds = (cpu.scored.choices[0] as unknown as { prompt_logprobs: PromptLogprobs }).prompt_logprobs;
    for (let p = 1; p < n; p++) {
      const cpuOwn = Object.values(cpuIds[p]!).find((e) => e.decoded_token === want.tokens[p] && e.logprob === want.token_logprobs[p])!;
      const own = Object.values(ids[p]!).find((e) => e.logprob === got.token_logprobs[p])!;
      expect(own, `position ${p}`).toBeDefined();
      if (cpuOwn.rank === 1) expect(own.rank, `position ${p}`).not.toBeNull();
      if (own.rank !== null) expect(Math.abs(own.rank - cpuOwn.rank!), `position ${p}`).toBeLessThanOrEqual(2);
    }
    const mean = sum / (n - 1);
    console.log(`prompt scoring, webgpu vs cpu over ${n - 1} tokens: mean |difference| ${mean.toFixed(4)} nats, largest ${largest.toFixed(4)}`);
    expect(mean).toBeLessThan(SCORING.mean);
  }, 300_000);

  it("embeds on the device as the CPU server does (unit vectors, cosine within the CPU graph's int8 rounding)", async () => {
    const embedded = await post<EmbeddingAnswer>(gpu!, "/embeddings", EMBED);
    expect(embedded.usage.prompt_tokens).toBe(cpu.embedded.usage.prompt_tokens);
    const [a, b] = [embedded.data[0].embedding, cpu.embedded.data[0].embedding];
    const cosine = a.reduce((n, x, i) => n + x * b[i], 0);
    console.log(JSON.stringify({ gpuCpuCosine: cosine }));
    expect(cosine).toBeGreaterThan(0.99);
  });

  it("names webgpu as the device in /health and /v1/models (and the CPU server cpu)", async () => {
    const health = (await (await fetch(`${gpu!.root}/health`)).json()) as { status: string; models: Record<string, string>; device: object };
    expect(health).toMatchObject({ status: "ok", models: { [TEXT_SLUG]: "serving" }, device: { name: "webgpu", adapter } });
    const list = (await (await fetch(`${gpu!.baseURL}/models`)).json()) as { data: Array<{ id: string; device?: string }> };
    expect(list.data.find((m) => m.id === TEXT_SLUG)).toMatchObject({ status: "serving", device: "webgpu" });
    expect(await (await fetch(`${gpu!.baseURL}/models/${TEXT_SLUG}`)).json()).toMatchObject({ status: "serving", device: "webgpu" });
    expect(cpu.model.device).toBe("cpu"); // the same model on the CPU server says so
    // onnxruntime's warnings about the shape arithmetic left to the CPU provider on purpose stay out of the operator's log.
    expect(gpu!.stderr()).not.toMatch(/\[W:onnxruntime/);
  });
});
