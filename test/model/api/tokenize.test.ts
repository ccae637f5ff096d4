/**
 * POST /tokenize and /detokenize through the real server and SmolLM2's tokenizer: the counts are the
 * prompt_tokens the same completion or chat is billed, text comes back whole, and special-token text
 * a client writes stays text. llama.cpp's /apply-template renders a chat as the prompt's text.
 */
import { getLlama } from "node-llama-cpp";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG, textGgufPath } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

let server: RunningServer | undefined;

beforeAll(async () => {
  server = await startServer(TEXT_SLUG);
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

const root = () => server!.baseURL.replace(/\/v1$/, "");
const client = () => new OpenAI({ baseURL: server!.baseURL, apiKey: "test", maxRetries: 0 });

async function post(path: string, body: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await fetch(root() + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = (await res.json()) as Record<string, any>;
  expect(res.status, JSON.stringify(json)).toBe(200);
  return json;
}

const TEXT = "Naïve café ☃ costs 3.50€ — <|im_start|>user";

describe("tokenize and detokenize on SmolLM2", () => {
  it("a prompt's count is the prompt_tokens of the completion, and its ids give the text back", async () => {
    const tokenized = await post("/tokenize", { model: TEXT_SLUG, prompt: TEXT, return_token_strs: true });
    const completion = await client().completions.create({ model: TEXT_SLUG, prompt: TEXT, max_tokens: 1 });
    expect(tokenized.count).toBe(completion.usage!.prompt_tokens);
    expect(tokenized.tokens).toHaveLength(tokenized.count);
    expect(tokenized.max_model_len).toBeGreaterThan(0);
    // The same ids as a token prompt continue the same way as the text.
    const byIds = await client().completions.create({ model: TEXT_SLUG, prompt: tokenized.tokens, max_tokens: 8, temperature: 0 });
    const byText = await client().completions.create({ model: TEXT_SLUG, prompt: TEXT, max_tokens: 8, temperature: 0 });
    expect(byIds.choices[0].text).toBe(byText.choices[0].text);
    // Special-token text a client writes is text: several ordinary tokens, not the control token.
    expect(tokenized.token_strs).not.toContain("<|im_start|>");
    expect(tokenized.token_strs.join("")).toContain("Ġcosts");
    expect((await post("/v1/detokenize", { model: TEXT_SLUG, tokens: tokenized.tokens })).prompt).toBe(TEXT);
  });

  it("a chat's count is the chat completion's prompt_tokens; its control tokens read back as their text", async () => {
    const messages = [
      { role: "system" as const, content: "You are brief." },
      { role: "user" as const, content: "What is 2+2?" },
    ];
    const tokenized = await post("/v1/tokenize", { model: TEXT_SLUG, messages });
    const chat = await client().chat.completions.create({ model: TEXT_SLUG, messages, max_tokens: 1 });
    expect(tokenized.count).toBe(chat.usage!.prompt_tokens);
    const text = (await post("/detokenize", { model: TEXT_SLUG, tokens: tokenized.tokens })).prompt;
    expect(text).toBe("<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
    const bare = await post("/tokenize", { model: TEXT_SLUG, messages, add_generation_prompt: false });
    expect(tokenized.tokens.slice(0, bare.count)).toEqual(bare.tokens);
    expect(bare.count).toBeLessThan(tokenized.count);
  });

  it("llama.cpp's /apply-template gives the chat's prompt as text, which tokenizes back to the ids a chat completion gets", async () => {
    const messages = [
      { role: "system", content: "You are brief." },
      { role: "user", content: "What is 2+2?" },
    ];
    const { prompt } = await post("/apply-template", { messages });
    expect(prompt).toBe("<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
    const asChat = await post("/tokenize", { model: TEXT_SLUG, messages });
    // The text a client sends on to /completion, its control tokens parsed as llama.cpp parses them.
    expect((await post("/tokenize", { content: prompt })).tokens).toEqual(asChat.tokens);
    const missing = await fetch(root() + "/apply-template", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x" }),
    });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { param: string } }).error.param).toBe("messages");
  });

  it("a chat continuing its last message, an assistant's: the prompt ends inside it, and the answer is the text's continuation", async () => {
    const messages = [
      { role: "user" as const, content: "What is the capital of France?" },
      { role: "assistant" as const, content: "The capital of France is" },
    ];
    const tokenized = await post("/tokenize", { model: TEXT_SLUG, messages, continue_final_message: true, add_generation_prompt: false });
    expect((await post("/detokenize", { model: TEXT_SLUG, tokens: tokenized.tokens })).prompt).toMatch(/<\|im_start\|>assistant\nThe capital of France is$/);
    const chat = await client().chat.completions.create({
      model: TEXT_SLUG,
      messages,
      max_tokens: 8,
      temperature: 0,
      // @ts-expect-error vLLM's extensions, not in the client's types
      continue_final_message: true,
      add_generation_prompt: false,
    });
    expect(chat.usage!.prompt_tokens).toBe(tokenized.count);
    // The same ids as a completion prompt: the same continuation.
    const raw = await client().completions.create({ model: TEXT_SLUG, prompt: tokenized.tokens, max_tokens: 8, temperature: 0 });
    expect(chat.choices[0].message.content).toBe(raw.choices[0].text);
    expect(chat.choices[0].message.content!.length).toBeGreaterThan(0);
  });

  it("llama.cpp's spelling: content without a model gives llama.cpp's ids for the text (node-llama-cpp's tokenizer on the same GGUF), pieces that join to it", async () => {
    const plain = "Naïve café ☃ costs 3.50€";
    const llama = await getLlama({ gpu: false });
    const model = await llama.loadModel({ modelPath: await textGgufPath() });
    try {
      const reference = [...model.tokenize(plain)].map(Number);
      const tokenized = await post("/tokenize", { content: plain });
      expect(tokenized.tokens).toEqual(reference);
      const pieces = (await post("/tokenize", { content: plain, with_pieces: true })).tokens as Array<{ id: number; piece: string }>;
      expect(pieces.map((p) => p.id)).toEqual(reference);
      // A piece of a character reads as U+FFFD; the others join to the text around them.
      expect(pieces.map((p) => p.piece).join("")).toContain(" costs 3.50");
      expect((await post("/detokenize", { tokens: reference })).content).toBe(plain);
      // Special-token text is a control token by default, as llama.cpp's /tokenize parses it; text with parse_special false.
      const chat = "<|im_start|>user\nHi<|im_end|>";
      const parsed = (await post("/tokenize", { content: chat })).tokens as number[];
      expect(parsed).toEqual([...model.tokenize(chat, true)].map(Number));
      expect(parsed).toContain(model.tokenize("<|im_start|>", true)[0]);
      const literal = (await post("/tokenize", { content: chat, parse_special: false })).tokens as number[];
      expect(literal).toEqual([...model.tokenize(chat, false)].map(Number));
      expect(literal.length).toBeGreaterThan(parsed.length);
    } finally {
      await model.dispose();
      await llama.dispose();
    }
  });

  it("an id outside the vocabulary is a 400 naming its place", async () => {
    const res = await fetch(root() + "/detokenize", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: TEXT_SLUG, tokens: [1, 10_000_000] }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe("tokens[1]");
  });
});
