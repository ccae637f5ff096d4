/**
 * Chat's predicted outputs (`prediction`), on a fake model that writes scripted text byte by byte:
 * the prediction's tokens reach the engine, which checks them as drafts (fewer model calls than
 * tokens, the same answer), and `usage` counts those confirmed and the rest, streamed or not.
 */
import { describe, expect, it } from "vitest";
import { AUTH, fakeApp, fakeModel, sseEvents, SLUG } from "./fake-model.js";

const ANSWER = "const total = items.reduce((sum, item) => sum + item.price, 0);";
const bytes = (text: string) => [...new TextEncoder().encode(text)];

async function ask(over: Record<string, unknown>) {
  const fake = fakeModel({ script: bytes(ANSWER) });
  const { app } = await fakeApp({ fake });
  const payload = { model: SLUG, messages: [{ role: "user", content: "Rename the variable." }], ...over };
  const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
  return { res, fake, body: (over.stream ? res.body : res.json()) as any };
}

describe("predicted outputs", () => {
  it("answers as without a prediction, in fewer model calls, and counts the prediction's tokens", async () => {
    const plain = await ask({});
    const predicted = await ask({ prediction: { type: "content", content: ANSWER } });
    expect(predicted.res.statusCode).toBe(200);
    expect(predicted.body.choices[0].message.content).toBe(ANSWER);
    expect(predicted.body.usage.completion_tokens).toBe(plain.body.usage.completion_tokens);
    expect(predicted.fake.backend.calls.length).toBeLessThan(plain.fake.backend.calls.length / 4);
    const details = predicted.body.usage.completion_tokens_details;
    expect(details.accepted_prediction_tokens).toBeGreaterThan(ANSWER.length * 0.8);
    expect(details.accepted_prediction_tokens + details.rejected_prediction_tokens).toBe(ANSWER.length);
    expect(plain.body.usage.completion_tokens_details).toMatchObject({ accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 });
  });

  it("takes text parts, rejoins a prediction the answer departs from, and reports usage when streamed", async () => {
    const edited = ANSWER.replace("total", "subtotal");
    const { body } = await ask({
      prediction: {
        type: "content",
        content: [
          { type: "text", text: edited.slice(0, 20) },
          { type: "text", text: edited.slice(20) },
        ],
      },
      stream: true,
      stream_options: { include_usage: true },
    });
    const events = sseEvents(body) as any[];
    const text = events.flatMap((e) => (e === "[DONE]" ? [] : e.choices.map((c: any) => c.delta.content ?? ""))).join("");
    expect(text).toBe(ANSWER);
    const usage = events.at(-2).usage;
    expect(usage.completion_tokens_details.accepted_prediction_tokens).toBeGreaterThan(ANSWER.length / 2);
    expect(usage.completion_tokens_details.accepted_prediction_tokens + usage.completion_tokens_details.rejected_prediction_tokens).toBe(edited.length);
  });

  it("refuses a prediction of another type or without content, naming it", async () => {
    for (const prediction of [{ type: "text", content: "x" }, { type: "content" }, "x"]) {
      const { res, body } = await ask({ prediction });
      expect(res.statusCode).toBe(400);
      expect(body.error.param).toMatch(/^prediction/);
    }
  });
});
