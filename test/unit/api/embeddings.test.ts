/**
 * POST /v1/embeddings on a fake model whose hidden states are known (fakeHidden): each input's
 * vector in input order, pooled as the model says, made unit length, cut to `dimensions`, as JSON
 * floats or base64; token-id inputs, truncation, and every bad input a 400 naming its field.
 */
import { describe, expect, it } from "vitest";
import { EOS, AUTH, fakeApp, fakeModel, SLUG, type FakeModelOptions } from "./fake-model.js";
import { fakeHidden } from "../scheduler/engine/fake-step-runner.js";

const bytes = (text: string) => [...new TextEncoder().encode(text)];

async function embed(payload: Record<string, unknown>, options: FakeModelOptions = {}) {
  const fake = fakeModel(options);
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url: "/v1/embeddings", payload: { model: SLUG, ...payload }, headers: AUTH });
  return { res, body: res.json() as any, fake };
}

const unit = (v: ArrayLike<number>) => {
  const length = Math.hypot(...Array.from(v));
  return Array.from(v, (x) => x / length);
};
/** The fake's last-position state of a text input (its bytes, then the EOS its vocabulary asks for). */
const lastOf = (ids: number[]) => fakeHidden(ids.at(-1)!, ids.length - 1);

describe("POST /v1/embeddings", () => {
  it("answers each input's vector in input order, unit length, with the tokens counted", async () => {
    const inputs = ["a cat", "two dogs", "z"];
    const { res, body } = await embed({ input: inputs });
    expect(res.statusCode).toBe(200);
    expect(body).toMatchObject({ object: "list", model: SLUG, usage: { prompt_tokens: 5 + 1 + 8 + 1 + 1 + 1, total_tokens: 17 } });
    expect(body.data.map((d: any) => [d.object, d.index])).toEqual([
      ["embedding", 0],
      ["embedding", 1],
      ["embedding", 2],
    ]);
    inputs.forEach((text, i) => {
      const want = unit(lastOf([...bytes(text), EOS]));
      body.data[i].embedding.forEach((x: number, j: number) => expect(x).toBeCloseTo(want[j], 6));
    });
  });

  it("pools the mean where the model does, and leaves the vector as pooled with normalize false", async () => {
    const ids = [...bytes("abc"), EOS];
    const { body } = await embed({ input: "abc", normalize: false }, { pooling: "mean" });
    const states = ids.map((t, p) => fakeHidden(t, p));
    const mean = Array.from(states[0], (_, j) => states.reduce((s, v) => s + v[j], 0) / ids.length);
    body.data[0].embedding.forEach((x: number, j: number) => expect(x).toBeCloseTo(mean[j], 5));
  });

  it("encodes base64 as the vector's little-endian float32 bytes", async () => {
    const [floats, encoded] = [await embed({ input: "hello" }), await embed({ input: "hello", encoding_format: "base64" })];
    const buffer = Buffer.from(encoded.body.data[0].embedding, "base64");
    const decoded = Array.from({ length: buffer.length / 4 }, (_, i) => buffer.readFloatLE(i * 4));
    expect(decoded).toEqual(floats.body.data[0].embedding.map(Math.fround));
  });

  it("cuts to 'dimensions' and makes the cut unit length again", async () => {
    const { body } = await embed({ input: "hello", dimensions: 2 });
    const want = unit(lastOf([...bytes("hello"), EOS]).subarray(0, 2));
    expect(body.data[0].embedding).toHaveLength(2);
    body.data[0].embedding.forEach((x: number, j: number) => expect(x).toBeCloseTo(want[j], 6));
  });

  it("takes token ids as they are, and text without its special tokens with add_special_tokens false", async () => {
    const ids = [104, 105, 106];
    const { body } = await embed({ input: [ids, [104]] });
    expect(body.usage.prompt_tokens).toBe(4);
    body.data[0].embedding.forEach((x: number, j: number) => expect(x).toBeCloseTo(unit(lastOf(ids))[j], 6));
    const plain = await embed({ input: "hij", add_special_tokens: false });
    expect(plain.body.usage.prompt_tokens).toBe(3);
    expect(plain.body.data[0].embedding).toEqual(body.data[0].embedding);
  });

  it("embeds a chat rendered through the model's template, with no assistant turn opened unless asked (vLLM's messages)", async () => {
    const messages = [{ role: "user", content: "hi" }];
    const { body, fake } = await embed({ messages });
    expect(fake.rendered).toEqual([messages]);
    const plain = bytes("<user>hi");
    expect(body.usage.prompt_tokens).toBe(plain.length);
    body.data[0].embedding.forEach((x: number, j: number) => expect(x).toBeCloseTo(unit(lastOf(plain))[j], 6));
    const opened = await embed({ messages, add_generation_prompt: true });
    expect(opened.body.usage.prompt_tokens).toBe(bytes("<user>hi<assistant>").length);
  });

  it("answers more inputs than the engine has slots and waiting room", async () => {
    const inputs = Array.from({ length: 60 }, (_, i) => `input ${i}`);
    const { res, body, fake } = await embed({ input: inputs }, { maxWaiting: 2 });
    expect(res.statusCode).toBe(200);
    expect(body.data).toHaveLength(60);
    inputs.forEach((text, i) => {
      const want = unit(lastOf([...bytes(text), EOS]));
      body.data[i].embedding.forEach((x: number, j: number) => expect(x).toBeCloseTo(want[j], 6));
    });
    expect(fake.backend.computed).toBe(0); // nothing was generated
  });

  it("cuts an input too long for the context to its last tokens with truncate_prompt_tokens, else refuses it", async () => {
    const long = "x".repeat(600);
    const refused = await embed({ input: ["ok", long] });
    expect(refused.res.statusCode).toBe(400);
    expect(refused.body.error).toMatchObject({ code: "context_length_exceeded", param: "input" });
    expect(refused.body.error.message).toContain("input[1]");
    const cut = await embed({ input: long + "y", truncate_prompt_tokens: 10 });
    expect(cut.res.statusCode).toBe(200);
    expect(cut.body.usage.prompt_tokens).toBe(10);
    const all = await embed({ input: long, truncate_prompt_tokens: -1 });
    expect(all.body.usage.prompt_tokens).toBe(511);
  });

  it("refuses bad inputs with a 400 naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ input: "" }, "input"],
      [{ input: [] }, "input"],
      [{ input: ["a", ""] }, "input"],
      [{ input: [[1, 2], []] }, "input"],
      [{ input: [1, 99999] }, "input"],
      [{ input: 3 }, "input"],
      [{ input: "a", dimensions: 5 }, "dimensions"],
      [{ input: "a", dimensions: 0 }, "dimensions"],
      [{ input: "a", encoding_format: "int8" }, "encoding_format"],
      [{ input: "a", messages: [{ role: "user", content: "x" }] }, "messages"],
      [{}, "input"],
      [{ input: "a", add_generation_prompt: true }, "add_generation_prompt"],
      [{ messages: [{ role: "user", content: "x" }], chat_template: "{{ x }}" }, "chat_template"],
      [{ input: Array.from({ length: 2049 }, () => "a") }, "input"],
    ];
    for (const [payload, param] of cases) {
      const { res, body } = await embed(payload);
      expect(res.statusCode, JSON.stringify(payload).slice(0, 80)).toBe(400);
      expect(body.error.param).toBe(param);
    }
    const noModel = await embed({ model: "no-such-model", input: "a" });
    expect(noModel.res.statusCode).toBe(404);
  });

  it("records usage and metrics once, the inputs' tokens as prompt tokens; a failed embedding is a 500 recorded as failed", async () => {
    for (const [what, fake, status, settled] of [
      ["answered", fakeModel(), 200, "completed"],
      ["failed", fakeModel({ failForwardOf: { opened: 2, message: "boom" } }), 500, "failed"],
    ] as const) {
      const records: any[] = [];
      const { app } = await fakeApp({ fake, usage: { record: (u) => records.push(u) } });
      const res = await app.inject({ method: "POST", url: "/v1/embeddings", payload: { model: SLUG, input: ["ab", "cde"] }, headers: AUTH });
      expect(res.statusCode, what).toBe(status);
      expect(records, what).toEqual([expect.objectContaining({ slug: SLUG, promptTokens: 3 + 4, completionTokens: 0, settledFrom: settled })]);
      expect(res.body, what).not.toContain("boom");
      const metrics = (await app.inject({ method: "GET", url: "/metrics" })).body;
      expect(metrics, what).toMatch(new RegExp(`kiln_prompt_tokens_total\\{model="${SLUG}"\\} 7\n`));
      // The engine serves the next request.
      const again = await app.inject({ method: "POST", url: "/v1/embeddings", payload: { model: SLUG, input: "x" }, headers: AUTH });
      expect(again.statusCode, what).toBe(200);
    }
  });

  it("refuses a model that makes no embeddings, naming it, and ignores unknown fields by name", async () => {
    const none = await embed({ input: "a" }, { embeds: false });
    expect(none.res.statusCode).toBe(400);
    expect(none.body.error).toMatchObject({ param: "model", message: `'${SLUG}' does not make embeddings.` });
    const extra = await embed({ input: "a", user: "u1", input_type: "query" });
    expect(extra.res.statusCode).toBe(200);
    expect(extra.res.headers["x-kiln-ignored-fields"]).toBe("input_type");
  });
});
