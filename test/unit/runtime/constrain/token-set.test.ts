import { describe, expect, it } from "vitest";
import type { TokenMatcher } from "../../../../src/runtime/constrain/index.js";
import { TokenSetMatcher } from "../../../../src/runtime/constrain/token-set.js";

const allowed = (mask: Int32Array) => [...Array(mask.length * 32).keys()].filter((id) => (mask[id >>> 5] & (1 << (id & 31))) !== 0);

/** A constraint that allows `ids` (null: free text) and records what it was given. */
function fakeConstraint(ids: number[] | null): TokenMatcher & { accepted: number[]; disposed: boolean } {
  const out = {
    accepted: [] as number[],
    disposed: false,
    terminated: false,
    async nextMask() {
      if (ids === null) return null;
      const mask = new Int32Array(2);
      for (const id of ids) mask[id >>> 5] |= 1 << (id & 31);
      return mask;
    },
    accept(token: number) {
      out.accepted.push(token);
      return ids === null || ids.includes(token);
    },
    dispose() {
      out.disposed = true;
    },
  };
  return out;
}

describe("TokenSetMatcher (allowed_token_ids)", () => {
  it("allows the listed tokens within the logits width, every step, and refuses the others", async () => {
    const m = new TokenSetMatcher([1, 33, 63, 64, 900], 64);
    expect(allowed(await m.nextMask())).toEqual([1, 33, 63]);
    expect(m.accept(33)).toBe(true);
    expect(m.accept(2)).toBe(false);
    expect(allowed(await m.nextMask())).toEqual([1, 33, 63]);
  });

  it("beside a constraint, both hold: their masks intersect, the free-text bans apply, both accept", async () => {
    const inner = fakeConstraint([1, 2, 40]);
    const m = new TokenSetMatcher([2, 40, 41], 64, inner);
    expect(allowed(await m.nextMask())).toEqual([2, 40]);
    expect(m.accept(40)).toBe(true);
    expect(m.accept(41)).toBe(false);
    expect(inner.accepted).toEqual([40, 41]);
    const free = new TokenSetMatcher([2, 40, 41], 64, fakeConstraint(null), [41, 50]);
    expect(allowed(await free.nextMask())).toEqual([2, 40]);
    m.dispose();
    expect(inner.disposed).toBe(true);
  });
});
