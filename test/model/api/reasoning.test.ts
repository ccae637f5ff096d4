/**
 * A reasoning model's answer through the real server and model: SmolLM2 served with
 * `--chat-template-file`, first with a ChatML template that opens the reasoning in the generation
 * prompt as DeepSeek-R1 distills' templates do, then with Qwen3's own template (ChatML too, so
 * SmolLM2's control tokens fit it). SmolLM2 never closes a reasoning it did not open itself, so
 * here the whole answer is reasoning; the split of a closed one is covered on a fake model
 * (test/unit/api/reasoning.test.ts). Chat completions and the Responses API, with the official client; a
 * thinking budget (chat's `thinking_token_budget`, Anthropic's `budget_tokens`) closes the thinking for it.
 */
import OpenAI from "openai";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readTokenizerSpec } from "../../../src/runtime/artifact/index.js";
import { Tokenizer } from "../../../src/runtime/text/index.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const TEMPLATES = join(import.meta.dirname, "../../fixtures/templates");
const QUESTION = "What is 2+2?";
const ANSWER_FORMAT = {
  type: "json_schema" as const,
  json_schema: { name: "answer", schema: { type: "object", properties: { answer: { type: "integer" } }, required: ["answer"], additionalProperties: false } },
};

let opening: RunningServer | undefined;
let qwen3: RunningServer | undefined;
let budgeted: RunningServer | undefined;
let tokenizer: Tokenizer;

beforeAll(async () => {
  tokenizer = Tokenizer.fromSpec(readTokenizerSpec((await compiledArtifact()).dir));
  opening = await startServer(TEXT_SLUG, ["--chat-template-file", join(TEMPLATES, "served/chatml-think.jinja")]);
  qwen3 = await startServer(TEXT_SLUG, ["--chat-template-file", join(TEMPLATES, "qwen3.jinja")]);
  budgeted = await startServer(TEXT_SLUG, ["--chat-template-file", join(TEMPLATES, "served/chatml-think.jinja"), "--thinking-budget", "4"]);
}, 600_000);

afterAll(async () => {
  expect(await stopServer(opening)).toBe(0);
  expect(await stopServer(qwen3)).toBe(0);
  expect(await stopServer(budgeted)).toBe(0);
});

const client = (server: RunningServer | undefined) => new OpenAI({ baseURL: server!.baseURL, apiKey: "test", maxRetries: 0 });

describe("a template that opens the reasoning in the prompt", () => {
  it("the answer is reasoning_content: the model's own continuation of the rendered prompt, counted in reasoning_tokens", async () => {
    const answer = await client(opening).chat.completions.create({
      model: TEXT_SLUG,
      messages: [{ role: "user", content: QUESTION }],
      max_tokens: 24,
      temperature: 0,
    });
    const message = answer.choices[0].message as (typeof answer.choices)[0]["message"] & { reasoning_content?: string | null };
    // The same prompt by its token ids on /v1/completions: the raw continuation, nothing split.
    const prompt = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n`, { parseSpecial: true });
    const raw = await client(opening).completions.create({ model: TEXT_SLUG, prompt, max_tokens: 24, temperature: 0 });
    expect(answer.usage!.prompt_tokens).toBe(prompt.length);
    expect(raw.choices[0].text).not.toContain("</think>");
    expect(message.reasoning_content).toBe(raw.choices[0].text);
    expect(message.content).toBe("");
    expect(answer.usage!.completion_tokens_details!.reasoning_tokens).toBe(answer.usage!.completion_tokens);
  });

  it("streamed, the reasoning_content deltas add up to the whole answer's", async () => {
    const request = { model: TEXT_SLUG, messages: [{ role: "user" as const, content: QUESTION }], max_tokens: 24, temperature: 0 };
    const whole = await client(opening).chat.completions.create(request);
    const stream = await client(opening).chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    let reasoning = "";
    let content = "";
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      reasoning += delta?.reasoning_content ?? "";
      content += delta?.content ?? "";
      usage = chunk.usage ?? usage;
    }
    expect(reasoning).toBe((whole.choices[0].message as { reasoning_content?: string }).reasoning_content);
    expect(content).toBe("");
    expect(usage!.completion_tokens_details!.reasoning_tokens).toBe(whole.usage!.completion_tokens_details!.reasoning_tokens);
  });

  it("on the Responses API the answer is a reasoning item, the same text, streamed or not", async () => {
    const chat = await client(opening).chat.completions.create({
      model: TEXT_SLUG,
      messages: [{ role: "user", content: QUESTION }],
      max_tokens: 24,
      temperature: 0,
    });
    const request = { model: TEXT_SLUG, input: QUESTION, max_output_tokens: 24, temperature: 0, store: false };
    const response = await client(opening).responses.create(request);
    const reasoning = response.output.find((item) => item.type === "reasoning");
    expect(reasoning?.content?.[0]?.text).toBe((chat.choices[0].message as { reasoning_content?: string }).reasoning_content);
    expect(response.output_text).toBe("");
    expect(response.usage!.output_tokens_details.reasoning_tokens).toBe(response.usage!.output_tokens);
    const stream = client(opening).responses.stream(request);
    let streamed = "";
    stream.on("response.reasoning_text.delta", (event) => (streamed += event.delta));
    const final = await stream.finalResponse();
    expect(streamed).toBe(reasoning?.content?.[0]?.text);
    expect(final.output.find((item) => item.type === "reasoning")?.content?.[0]?.text).toBe(streamed);
  });

  it("a JSON schema holds only after the thinking: the thinking is the model's own free continuation", async () => {
    const request = { model: TEXT_SLUG, messages: [{ role: "user" as const, content: QUESTION }], max_tokens: 24, temperature: 0 };
    const free = await client(opening).chat.completions.create(request);
    const constrained = await client(opening).chat.completions.create({ ...request, response_format: ANSWER_FORMAT });
    const reasoning = (m: OpenAI.ChatCompletionMessage) => (m as { reasoning_content?: string | null }).reasoning_content;
    // Held from its first token, the answer would have been the schema's JSON, as content. Here the
    // thinking is the free answer's text; where that one ends, this one cannot until its JSON is written.
    expect(free.choices[0].finish_reason).toBe("stop");
    expect(reasoning(constrained.choices[0].message)!.startsWith(reasoning(free.choices[0].message)!)).toBe(true);
    expect(reasoning(constrained.choices[0].message)!.length).toBeGreaterThan(reasoning(free.choices[0].message)!.length);
    expect(constrained.choices[0].message.content).toBe("");
    expect(constrained.choices[0].finish_reason).toBe("length");
  });

  it("a thinking budget closes the thinking after that many tokens: the free answer's first tokens, then the content, held to a schema", async () => {
    const prompt = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n`, { parseSpecial: true });
    const first = (await client(opening).completions.create({ model: TEXT_SLUG, prompt, max_tokens: 4, temperature: 0 })).choices[0].text;
    const request = { model: TEXT_SLUG, messages: [{ role: "user" as const, content: QUESTION }], max_tokens: 40, temperature: 0, thinking_token_budget: 4 };
    const reasoning = (m: OpenAI.ChatCompletionMessage) => (m as { reasoning_content?: string | null }).reasoning_content;
    const budgeted = await client(opening).chat.completions.create(request as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(reasoning(budgeted.choices[0].message)).toBe(first);
    // Unbudgeted, this model never closes the thinking its prompt opened: the answer is content only because the budget closed it.
    const held = await client(opening).chat.completions.create({ ...request, response_format: ANSWER_FORMAT } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(reasoning(held.choices[0].message)).toBe(first);
    expect(held.choices[0].finish_reason).toBe("stop");
    expect(Object.keys(JSON.parse(held.choices[0].message.content!))).toEqual(["answer"]);
    // Anthropic's budget_tokens is the same budget.
    const anthropic = async (thinking: Record<string, unknown>, maxTokens: number) =>
      fetch(`${opening!.root}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": "test" },
        body: JSON.stringify({ model: TEXT_SLUG, max_tokens: maxTokens, temperature: 0, thinking, messages: [{ role: "user", content: QUESTION }] }),
      });
    const message = await (await anthropic({ type: "enabled", budget_tokens: 4 }, 40)).json();
    expect(message.content[0]).toEqual({ type: "thinking", thinking: first, signature: "" });
    const tooBig = await anthropic({ type: "enabled", budget_tokens: 40 }, 40);
    expect(tooBig.status).toBe(400);
    expect((await tooBig.json()).error.message).toContain("thinking.budget_tokens");
  });

  it("--thinking-budget holds every route's thinking where the request names no budget; a request's own wins", async () => {
    const prompt = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n`, { parseSpecial: true });
    const first = async (n: number) => (await client(opening).completions.create({ model: TEXT_SLUG, prompt, max_tokens: n, temperature: 0 })).choices[0].text;
    const messages = [{ role: "user" as const, content: QUESTION }];
    const chat = await client(budgeted).chat.completions.create({ model: TEXT_SLUG, messages, max_tokens: 24, temperature: 0 });
    expect((chat.choices[0].message as { reasoning_content?: string }).reasoning_content).toBe(await first(4));
    const own = await client(budgeted).chat.completions.create({
      model: TEXT_SLUG,
      messages,
      max_tokens: 24,
      temperature: 0,
      thinking_token_budget: 2,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect((own.choices[0].message as { reasoning_content?: string }).reasoning_content).toBe(await first(2));
    const response = await client(budgeted).responses.create({ model: TEXT_SLUG, input: QUESTION, max_output_tokens: 24, temperature: 0, store: false });
    expect(response.output.find((item) => item.type === "reasoning")?.content?.[0]?.text).toBe(await first(4));
    const ollama = await fetch(`${budgeted!.root}/api/chat`, {
      method: "POST",
      body: JSON.stringify({ model: TEXT_SLUG, messages, stream: false, options: { temperature: 0, num_predict: 24 } }),
    });
    expect((await ollama.json()).message.thinking).toBe(await first(4));
  });

  it("cannot be switched off: reasoning_effort none is a 400 naming it", async () => {
    const error = await client(opening)
      .chat.completions.create({ model: TEXT_SLUG, messages: [{ role: "user", content: QUESTION }], reasoning_effort: "none", max_tokens: 4 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("reasoning_effort");
  });
});

describe("Qwen3's template", () => {
  it("with reasoning_effort none, a JSON schema holds from the first token and the answer is all content", async () => {
    const answer = await client(qwen3).chat.completions.create({
      model: TEXT_SLUG,
      messages: [{ role: "user", content: QUESTION }],
      max_tokens: 32,
      temperature: 0,
      reasoning_effort: "none",
      response_format: ANSWER_FORMAT,
    });
    expect(answer.choices[0].finish_reason).toBe("stop");
    expect(answer.choices[0].message).not.toHaveProperty("reasoning_content");
    expect(Object.keys(JSON.parse(answer.choices[0].message.content!))).toEqual(["answer"]);
  });

  it("reasoning_effort none renders its empty reasoning into the prompt, and the answer comes as content", async () => {
    const messages = [{ role: "user" as const, content: QUESTION }];
    const on = await client(qwen3).chat.completions.create({ model: TEXT_SLUG, messages, max_tokens: 16, temperature: 0 });
    const off = await client(qwen3).chat.completions.create({ model: TEXT_SLUG, messages, max_tokens: 16, temperature: 0, reasoning_effort: "none" });
    const kwargs = await client(qwen3).chat.completions.create({
      model: TEXT_SLUG,
      messages,
      max_tokens: 16,
      temperature: 0,
      // @ts-expect-error vLLM's and llama.cpp's extension, not in the client's types
      chat_template_kwargs: { enable_thinking: false },
    });
    expect(off.usage!.prompt_tokens - on.usage!.prompt_tokens).toBe(tokenizer.encode("<think>\n\n</think>\n\n", { parseSpecial: true }).length);
    expect(kwargs.usage!.prompt_tokens).toBe(off.usage!.prompt_tokens);
    expect(kwargs.choices[0].message.content).toBe(off.choices[0].message.content);
    for (const answer of [on, off]) {
      expect(answer.choices[0].message).toMatchObject({ reasoning_content: null });
      expect(answer.choices[0].message.content!.length).toBeGreaterThan(0);
      expect(answer.usage!.completion_tokens_details!.reasoning_tokens).toBe(0);
    }
  });
});
