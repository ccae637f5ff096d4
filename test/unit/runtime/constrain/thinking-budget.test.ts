import { describe, expect, it } from "vitest";
import type { TokenMatcher } from "../../../../src/runtime/constrain/index.js";
import { ThinkingBudgetMatcher, type ThinkingBudget } from "../../../../src/runtime/constrain/thinking-budget.js";

const allowed = (mask: Int32Array | null | undefined) =>
  mask ? [...Array(mask.length * 32).keys()].filter((id) => (mask[id >>> 5] & (1 << (id & 31))) !== 0) : mask;

/** Tags of several tokens each, as a vocabulary without them as added tokens writes them: `<think>` 1 2 3, `</think>` 4 2 3. */
const OPEN = [1, 2, 3];
const CLOSE = [4, 2, 3];
const budget = (tokens: number, opened: boolean): ThinkingBudget => ({ tokens, opened, open: OPEN, close: CLOSE });

/** Feeds `tokens` in order, each after asking for the step's mask; the masks asked for. */
async function feed(m: TokenMatcher, tokens: number[]): Promise<Array<number[] | null | undefined>> {
  const masks = [];
  for (const t of tokens) {
    masks.push(allowed(await m.nextMask()));
    expect(m.accept(t), `token ${t}`).toBe(true);
  }
  return masks;
}

describe("ThinkingBudgetMatcher", () => {
  it("with the thinking opened by the prompt, leaves the first tokens free, then forces the close tag token by token, then frees the answer", async () => {
    const m = new ThinkingBudgetMatcher(budget(3, true), 64);
    expect(await feed(m, [10, 11, 12])).toEqual([undefined, undefined, undefined]);
    expect(await feed(m, [4, 2, 3])).toEqual([[4], [2], [3]]);
    expect(await feed(m, [20, 4, 2, 3, 21])).toEqual([undefined, undefined, undefined, undefined, undefined]);
  });

  it("counts from the model's own open tag, and a model that closes its thinking in time is never held", async () => {
    const late = new ThinkingBudgetMatcher(budget(2, false), 64);
    expect(await feed(late, [10, 1, 2, 3, 11, 12])).toEqual(Array(6).fill(undefined));
    expect(allowed(await late.nextMask())).toEqual([4]);
    const early = new ThinkingBudgetMatcher(budget(5, true), 64);
    expect(await feed(early, [10, 4, 2, 3, 11, 12, 13, 14, 15])).toEqual(Array(9).fill(undefined));
  });

  it("goes on from a close tag the model had begun, closes at once at 0, and refuses any other token while it forces", async () => {
    const begun = new ThinkingBudgetMatcher(budget(2, true), 64);
    await feed(begun, [10, 4]);
    expect(allowed(await begun.nextMask())).toEqual([2]);
    const none = new ThinkingBudgetMatcher(budget(0, true), 64);
    expect(allowed(await none.nextMask())).toEqual([4]);
    expect(none.accept(5)).toBe(false);
  });

  it("beside another constraint: its masks while nothing is forced, and every token accepted by both", async () => {
    const accepted: number[] = [];
    const inner: TokenMatcher = {
      terminated: false,
      nextMask: async () => null,
      accept: (t) => (accepted.push(t), t !== 99),
      dispose: () => {},
    };
    const m = new ThinkingBudgetMatcher(budget(1, true), 64, inner);
    expect(await m.nextMask()).toBeNull();
    expect(m.accept(10)).toBe(true);
    expect(allowed(await m.nextMask())).toEqual([4]);
    expect(m.accept(4)).toBe(true);
    expect(accepted).toEqual([10, 4]);
    expect(m.accept(99)).toBe(false);
  });
});
