import { describe, expect, it } from "vitest";
import { ChoiceOutput } from "../../../../src/scheduler/engine/choice-output.js";
import { fakeStepRunner } from "./fake-step-runner.js";

const euro = new TextEncoder().encode("€"); // 3 bytes
const vocab = ["Hi", " there", "!", "<", "/", "s", ">", euro.slice(0, 2), euro.slice(2), " ok"];

function run(tokens: number[], stop: string[], logprobs = false) {
  const backend = fakeStepRunner({ slots: 1, vocab });
  const out = new ChoiceOutput(backend.createDecoder(), { stop, logprobs: logprobs ? { top: 1 } : undefined, tokenBytes: backend.tokenBytes });
  const deltas: string[] = [];
  const lps: string[] = [];
  let stopped = false;
  for (const token of tokens) {
    const step = out.push({ token, logprob: -1, top: [{ token, logprob: -1 }] });
    deltas.push(step.text);
    lps.push(...(step.logprobs ?? []).map((l) => l.token));
    if (step.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) {
    const tail = out.finish();
    deltas.push(tail.text);
    lps.push(...(tail.logprobs ?? []).map((l) => l.token));
  }
  return { deltas, text: deltas.join(""), stopped, lps };
}

describe("ChoiceOutput", () => {
  it("holds back a stop string split over several tokens and never emits it", () => {
    const r = run([0, 1, 3, 4, 5, 6, 9], ["</s>"]);
    expect(r.deltas).toEqual(["Hi", " there", "", "", "", ""]);
    expect(r.text).toBe("Hi there");
    expect(r.stopped).toBe(true);
  });

  it("releases a false start of a stop string", () => {
    const r = run([0, 3, 4, 2], ["</s>"]);
    expect(r.deltas).toEqual(["Hi", "", "", "</!", ""]);
  });

  it("never splits a UTF-8 character across deltas", () => {
    const r = run([0, 7, 8, 2], []);
    expect(r.deltas).toEqual(["Hi", "", "€", "!", ""]);
  });

  it("releases each token's logprob with its text, and drops those of the stop string", () => {
    const r = run([0, 1, 3, 4, 5, 6], ["</s>"], true);
    expect(r.lps).toEqual(["Hi", " there"]);
    const r2 = run([0, 3, 2], ["</s>"], true);
    expect(r2.lps).toEqual(["Hi", "<", "!"]);
  });

  it("looks for stop strings only from the min_tokens-th token's text on", () => {
    const backend = fakeStepRunner({ slots: 1, vocab });
    const ending = (minTokens: number) => {
      const out = new ChoiceOutput(backend.createDecoder(), { stop: ["!"], minTokens });
      const deltas: string[] = [];
      for (const token of [0, 2, 1, 2, 1]) {
        const step = out.push({ token });
        deltas.push(step.text);
        if (step.stopped) return deltas;
      }
      return [...deltas, out.finish().text];
    };
    expect(ending(0)).toEqual(["Hi", ""]);
    // The second token's "!" is the text of a token before the third: released, not a stop.
    expect(ending(3)).toEqual(["Hi", "!", " there", ""]);
    expect(ending(10)).toEqual(["Hi", "!", " there", "!", " there", ""]);
  });
});
