import { describe, expect, it } from "vitest";
import { admissions, nextChunk, planStep, waitingAfterAdmission, type PrefillCandidate } from "../../../../src/scheduler/engine/step-planner.js";

const limits = { stepTokens: 64, prefillChunk: 16 };
const cand = (cached: number, promptLength: number, eligible = true): PrefillCandidate => ({ cached, promptLength, eligible });

describe("planStep", () => {
  it("decodes every running sequence and spends the rest on whole prompt chunks, oldest first", () => {
    const plan = planStep(10, [cand(0, 100), cand(0, 20)], limits);
    // 54 tokens left: three 16-token chunks of the oldest (48), then nothing of 16 fits.
    expect(plan.prefill).toEqual([
      { index: 0, start: 0, count: 16, last: false },
      { index: 0, start: 16, count: 16, last: false },
      { index: 0, start: 32, count: 16, last: false },
    ]);
    expect(plan.tokens).toBe(58);
  });

  it("lets a younger prompt use budget the oldest cannot", () => {
    const plan = planStep(40, [cand(0, 100), cand(0, 5)], limits);
    expect(plan.prefill).toEqual([
      { index: 0, start: 0, count: 16, last: false },
      { index: 1, start: 0, count: 5, last: true },
    ]);
  });

  it("cuts prompts only at multiples of the chunk, so a reused prefix realigns first", () => {
    expect(nextChunk(0, 40, 16)).toBe(16);
    expect(nextChunk(10, 40, 16)).toBe(6);
    expect(nextChunk(32, 40, 16)).toBe(8);
    expect(planStep(0, [cand(10, 40)], limits).prefill.map((c) => c.count)).toEqual([6, 16, 8]);
  });

  it("skips sequences that wait for a sibling's prefill", () => {
    expect(planStep(0, [cand(0, 10, false), cand(0, 10)], limits).prefill).toEqual([{ index: 1, start: 0, count: 10, last: true }]);
  });

  it("gives background prompts one chunk a step while sequences decode, and the whole budget otherwise", () => {
    const bg = (cached: number, promptLength: number): PrefillCandidate => ({ ...cand(cached, promptLength), background: true });
    const candidates = [bg(0, 5), bg(0, 40), cand(0, 5), bg(0, 3)];
    expect(planStep(2, candidates, limits).prefill).toEqual([
      { index: 0, start: 0, count: 5, last: true },
      { index: 2, start: 0, count: 5, last: true },
    ]);
    // A background prompt longer than a chunk goes one chunk a step.
    expect(planStep(2, [bg(0, 40)], limits).prefill).toEqual([{ index: 0, start: 0, count: 16, last: false }]);
    expect(planStep(0, candidates, limits).prefill.map((c) => [c.index, c.count])).toEqual([
      [0, 5],
      [1, 16],
      [1, 16],
      [1, 8],
      [2, 5],
      [3, 3],
    ]);
  });

  it("still gives the oldest one chunk when the decode rows leave no room", () => {
    expect(planStep(64, [cand(0, 30), cand(0, 3)], limits).prefill).toEqual([{ index: 0, start: 0, count: 16, last: false }]);
    expect(planStep(3, [], limits)).toEqual({ decodeRows: 3, prefill: [], tokens: 3 });
  });
});

describe("admission", () => {
  it("admits choices first come first served, never skipping the head", () => {
    expect(admissions([{ waitingChoices: 1 }, { waitingChoices: 1 }], 5)).toBe(2);
    expect(admissions([{ waitingChoices: 3 }, { waitingChoices: 1 }], 2)).toBe(2);
    expect(admissions([{ waitingChoices: 1 }, { waitingChoices: 3 }, { waitingChoices: 1 }], 3)).toBe(3);
    expect(admissions([{ waitingChoices: 1 }], 0)).toBe(0);
  });

  it("counts the requests that would still wait", () => {
    const q = (...n: number[]) => n.map((waitingChoices) => ({ waitingChoices }));
    expect(waitingAfterAdmission(q(1, 1, 1), 2)).toBe(1);
    expect(waitingAfterAdmission(q(3, 1), 2)).toBe(1); // the first starts with two of its choices
    expect(waitingAfterAdmission(q(1, 1), 0)).toBe(2);
  });
});
