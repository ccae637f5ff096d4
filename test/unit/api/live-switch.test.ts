/**
 * A live switch seen from the HTTP API, over fake models: 8 streaming clients in a loop while the
 * registry switches the model's artifact. No request fails, each answer is whole and names one
 * artifact in every chunk, answers started after the switch name the new one, and the old one is
 * closed once its last stream is done.
 */
import { describe, expect, it, vi } from "vitest";
import { ModelRegistry } from "../../../src/scheduler/index.js";
import { AUTH, fakeApp, fakeModel, SLUG, sseEvents, word } from "./fake-model.js";

const SCRIPT = Array.from({ length: 8 }, () => word("Hello"));

describe("live switch through the API", () => {
  it("switches under streaming load with no failed or altered request", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 20 });
    const old = fakeModel({ tokenDelayMs: 3, script: SCRIPT });
    old.model.artifactId = "artifact-old";
    const closeOld = vi.spyOn(old.model, "close");
    registry.serve(old.model);
    const { app } = await fakeApp({ models: registry });

    const answers: Array<{ status: number; fingerprints: Set<string>; text: string; startedAfterSwitch: boolean }> = [];
    let switchedAt = Infinity;
    let stop = false;
    const client = async () => {
      while (!stop) {
        const startedAt = performance.now();
        const res = await app.inject({
          method: "POST",
          url: "/v1/chat/completions",
          headers: AUTH,
          payload: { model: SLUG, messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 8 },
        });
        const answer = { status: res.statusCode, fingerprints: new Set<string>(), text: "", startedAfterSwitch: startedAt > switchedAt };
        if (res.statusCode === 200) {
          for (const e of sseEvents(res.body)) {
            if (e === "[DONE]") continue;
            const chunk = e as { system_fingerprint: string; choices: Array<{ delta: { content?: string } }> };
            answer.fingerprints.add(chunk.system_fingerprint);
            answer.text += chunk.choices[0]?.delta.content ?? "";
          }
        }
        answers.push(answer);
      }
    };
    const clients = Array.from({ length: 8 }, client);
    await new Promise((r) => setTimeout(r, 150));
    const next = fakeModel({ tokenDelayMs: 3, script: SCRIPT });
    next.model.artifactId = "artifact-new";
    const result = await registry.switchModel(SLUG, async () => {
      await new Promise((r) => setTimeout(r, 30)); // loading takes a while; the old one keeps answering
      return next.model;
    });
    switchedAt = performance.now();
    await result.retired;
    expect(closeOld).toHaveBeenCalledTimes(1);
    await new Promise((r) => setTimeout(r, 150));
    stop = true;
    await Promise.all(clients);

    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    expect(answers.every((a) => a.fingerprints.size === 1 && a.text === "Hello".repeat(8))).toBe(true);
    const after = answers.filter((a) => a.startedAfterSwitch);
    expect(after.length).toBeGreaterThan(8);
    expect(after.every((a) => a.fingerprints.has("artifact-new"))).toBe(true);
    expect(answers.some((a) => a.fingerprints.has("artifact-old"))).toBe(true);
    await registry.close();
  });
});
