import { describe, expect, it } from "vitest";
import { SamplingParamsError, type SamplingParams } from "../../../../src/runtime/sampling/params.js";
import { SequenceSampler, argmax, selectNucleus, selectTop } from "../../../../src/runtime/sampling/sampler.js";
import { Xoshiro128ss } from "../../../../src/runtime/sampling/prng.js";
import { chiBound, chiSquare, logSoftmax, randomLogits, referenceDistribution, softmax, type RefParams } from "./helpers.js";

/** Draws `n` tokens from the same row with a fresh sampler (penalties never kick in: none set). */
function histogram(logits: Float32Array, params: SamplingParams, n: number, seed = 1): number[] {
  const sampler = new SequenceSampler({ ...params, seed });
  const counts = new Array<number>(logits.length).fill(0);
  for (let i = 0; i < n; i++) counts[sampler.sample(logits).token]++;
  return counts;
}

function expectMatches(counts: number[], probs: number[]): void {
  const { chi2, dof, impossible } = chiSquare(counts, probs);
  expect(impossible).toBe(0);
  expect(chi2).toBeLessThan(chiBound(dof));
}

const logitsOf = (probs: number[]) => Float32Array.from(probs, (p) => Math.log(p));

describe("SequenceSampler: greedy", () => {
  it("temperature 0 picks the argmax, lowest id on ties", () => {
    const s = new SequenceSampler({ temperature: 0 });
    expect(s.sample(Float32Array.from([0.1, 3, -1, 2.9])).token).toBe(1);
    expect(s.sample(Float32Array.from([1, 5, 5, 2, 5])).token).toBe(1);
    expect(s.sample(Float32Array.from([-Infinity, Number.NaN, -3])).token).toBe(2);
    for (let seed = 0; seed < 5; seed++) {
      const row = randomLogits(5000, seed);
      expect(s.sample(row).token).toBe(argmax(row));
    }
  });

  it("approaches greedy as temperature goes to 0", () => {
    const row = Float32Array.from([1, 1.5, 1.2, -3, 1.4]);
    for (const temperature of [0.005, 1e-4, 1e-8]) {
      const counts = histogram(row, { temperature }, 2000);
      expect(counts[1]).toBe(2000);
    }
    // ...while at temperature 1 the others do get picked.
    expect(histogram(row, { temperature: 1 }, 2000)[1]).toBeLessThan(1000);
  });

  it("top_k 1 equals greedy, penalties and bias included", () => {
    const params = { presence_penalty: 0.7, frequency_penalty: 0.3, logit_bias: { "3": 2 } };
    const greedy = new SequenceSampler({ ...params, temperature: 0 });
    const topK1 = new SequenceSampler({ ...params, temperature: 1.3, top_k: 1, seed: 5 });
    for (let step = 0; step < 50; step++) {
      const row = randomLogits(2000, 100 + step, 0.5);
      expect(topK1.sample(row).token).toBe(greedy.sample(row).token);
    }
  });

  it("top_p 0 keeps only the most probable token", () => {
    const row = randomLogits(3000, 9);
    expect(histogram(row, { top_p: 0 }, 200).indexOf(200)).toBe(argmax(row));
  });
});

describe("SequenceSampler: seeds", () => {
  const rows = Array.from({ length: 200 }, (_, i) => randomLogits(1000, 1000 + i, 1));
  const run = (params: SamplingParams, stream = 0) => {
    const s = new SequenceSampler({ top_p: 0.95, ...params }, { stream });
    return rows.map((r) => s.sample(r).token);
  };

  it("the same seed and logits give the same tokens", () => {
    expect(run({ seed: 1234 })).toEqual(run({ seed: 1234 }));
    expect(run({ seed: 1234, top_k: 20, min_p: 0.01, temperature: 0.7 })).toEqual(run({ seed: 1234, top_k: 20, min_p: 0.01, temperature: 0.7 }));
  });

  it("different seeds, streams and unseeded samplers differ", () => {
    expect(run({ seed: 1234 })).not.toEqual(run({ seed: 1235 }));
    expect(run({ seed: 1234 }, 1)).not.toEqual(run({ seed: 1234 }, 0));
    const a = new SequenceSampler();
    const b = new SequenceSampler();
    expect(a.seed).not.toBe(b.seed);
    expect(run({})).not.toEqual(run({}));
    // An unseeded sampler's seed reproduces it.
    expect(run({ seed: a.seed })).toEqual(run({ seed: a.seed }));
  });

  it("rejects invalid parameters", () => {
    expect(() => new SequenceSampler({ temperature: -1 })).toThrow(SamplingParamsError);
  });
});

describe("SequenceSampler: distribution", () => {
  it("empirical frequencies match the softmax on a tiny vocabulary", () => {
    const row = Float32Array.from([0, 1, 2, 0.5, -1, 1.7]);
    expectMatches(histogram(row, {}, 200_000), softmax(row));
  });

  it("applies the temperature before the softmax", () => {
    const row = Float32Array.from([0, 1, 2, 0.5, -1, 1.7]);
    for (const temperature of [0.5, 1.8]) {
      expectMatches(histogram(row, { temperature }, 200_000, 3), softmax(Array.from(row, (x) => x / temperature)));
    }
  });

  it("top_k keeps the k most likely, renormalized", () => {
    const row = Float32Array.from([0, 1, 2, 0.5, -1, 1.7, 1.9]);
    const counts = histogram(row, { top_k: 3 }, 100_000);
    expectMatches(counts, referenceDistribution(row, { top_k: 3 }));
    expect(counts.map((c) => c > 0)).toEqual([false, false, true, false, false, true, true]);
  });

  it("top_p keeps exactly the nucleus", () => {
    const probs = [0.1, 0.4, 0.05, 0.3, 0.15];
    const row = logitsOf(probs);
    // 0.4 + 0.3 = 0.7 >= 0.65: tokens 1 and 3.
    let counts = histogram(row, { top_p: 0.65 }, 100_000);
    expect(counts.map((c) => c > 0)).toEqual([false, true, false, true, false]);
    expectMatches(counts, [0, 4 / 7, 0, 3 / 7, 0]);
    // 0.4 + 0.3 + 0.15 = 0.85 >= 0.75: tokens 1, 3 and 4.
    counts = histogram(row, { top_p: 0.75 }, 100_000);
    expectMatches(counts, [0, 0.4 / 0.85, 0, 0.3 / 0.85, 0.15 / 0.85]);
    // Just below 0.4: the top token alone.
    expect(histogram(row, { top_p: 0.39 }, 1000)[1]).toBe(1000);
  });

  it("top_p on a large vocabulary keeps the same set as a full sort", () => {
    const row = randomLogits(3000, 77, 3);
    for (const top_p of [0.5, 0.9, 0.99]) {
      const expected = referenceDistribution(row, { top_p });
      const counts = histogram(row, { top_p }, 20_000, 11);
      expect(chiSquare(counts, expected).impossible).toBe(0);
      // Every nucleus token with real mass shows up.
      for (let i = 0; i < row.length; i++) if (expected[i] > 0.002) expect(counts[i]).toBeGreaterThan(0);
    }
  });

  // A cluster of near-equal logits lands in one histogram bin, so the top_k / top_p boundary
  // must be found exactly inside that bin.
  const cluster = () => {
    const row = new Float32Array(1000).fill(-3);
    row[500] = 5;
    for (let i = 0; i < 200; i++) row[100 + ((i * 37) % 200) * 2] = i * 1e-5; // shuffled ids
    return row;
  };
  const support = (probs: number[]) => probs.flatMap((p, i) => (p > 0 ? [i] : []));
  const drawn = (counts: number[]) => counts.flatMap((c, i) => (c > 0 ? [i] : []));

  it("top_p boundary inside a crowded bin is exact", () => {
    const row = cluster();
    const expected = referenceDistribution(row, { top_p: 0.7 });
    expect(support(expected).length).toBeGreaterThan(60);
    expect(support(expected).length).toBeLessThan(180);
    const counts = histogram(row, { top_p: 0.7 }, 60_000, 4);
    expect(drawn(counts)).toEqual(support(expected));
    expectMatches(counts, expected);
  });

  it("top_k boundary inside a crowded bin is exact", () => {
    const row = cluster();
    const expected = referenceDistribution(row, { top_k: 50 });
    expect(support(expected)).toHaveLength(50);
    const counts = histogram(row, { top_k: 50 }, 30_000, 4);
    expect(drawn(counts)).toEqual(support(expected));
    expectMatches(counts, expected);
  });

  it("min_p drops tokens below min_p * p_max", () => {
    const probs = [0.5, 0.3, 0.15, 0.05, 0.0999];
    const row = logitsOf(probs);
    // threshold 0.2 * 0.5 = 0.1: drops 0.05 and 0.0999.
    const counts = histogram(row, { min_p: 0.2 }, 100_000);
    expect(counts.map((c) => c > 0)).toEqual([true, true, true, false, false]);
    expectMatches(counts, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0, 0]);
    expect(histogram(row, { min_p: 1 }, 1000)[0]).toBe(1000);
  });

  it("combined filters match the documented pipeline", () => {
    const row = randomLogits(400, 5, 2);
    const cases: RefParams[] = [
      { temperature: 0.8, top_k: 50, top_p: 0.9, min_p: 0.05 },
      { temperature: 1.5, top_p: 0.8, min_p: 0.02 },
      { temperature: 0.6, top_k: 30, min_p: 0.1 },
      { temperature: 1, top_k: 200, top_p: 0.97 },
    ];
    for (const [i, params] of cases.entries()) {
      expectMatches(histogram(row, params, 100_000, 20 + i), referenceDistribution(row, params));
    }
  });
});

describe("SequenceSampler: penalties and bias", () => {
  it("presence and frequency penalties follow the generated counts", () => {
    const row = Float32Array.from([0, 0, 0, 0]);
    const params = { presence_penalty: 0.5, frequency_penalty: 0.25, seed: 8 };
    const s = new SequenceSampler(params);
    s.accept(0);
    s.accept(0);
    s.accept(1);
    expect(s.countOf(0)).toBe(2);
    expect(s.generated).toBe(3);
    const counts = new Map([
      [0, 2],
      [1, 1],
    ]);
    // logits: -0.5 - 2 * 0.25 = -1, -0.5 - 0.25 = -0.75, 0, 0
    const expected = referenceDistribution(row, params, counts);
    softmax([-1, -0.75, 0, 0]).forEach((q, i) => expect(expected[i]).toBeCloseTo(q, 12));
    // Sample from a clone of that state many times (sample() itself records tokens).
    const hist = [0, 0, 0, 0];
    const n = 100_000;
    for (let i = 0; i < n; i++) {
      const t = new SequenceSampler({ ...params, seed: i });
      t.accept(0);
      t.accept(0);
      t.accept(1);
      hist[t.sample(row).token]++;
    }
    expectMatches(hist, expected);
  });

  it("sample() records its token, and negative penalties favour repeats", () => {
    const row = Float32Array.from([0, 0, 0]);
    const s = new SequenceSampler({ temperature: 0, presence_penalty: -1 });
    const first = s.sample(row).token;
    expect(first).toBe(0);
    expect(s.countOf(0)).toBe(1);
    for (let i = 0; i < 5; i++) expect(s.sample(row).token).toBe(0);
    expect(s.generated).toBe(6);

    const fresh = new SequenceSampler({ temperature: 0, frequency_penalty: 2 });
    // frequency penalty pushes greedy through the tokens in turn
    expect([0, 1, 2, 3, 4, 5].map(() => fresh.sample(row).token)).toEqual([0, 1, 2, 0, 1, 2]);
  });

  it("penalties change a real distribution as specified", () => {
    const row = randomLogits(300, 42, 1);
    const params = { presence_penalty: 1.2, frequency_penalty: 0.4, temperature: 0.9, top_k: 40 };
    const history = [argmax(row), argmax(row), 17, 17, 17, 200];
    const counts = new Map<number, number>();
    for (const t of history) counts.set(t, (counts.get(t) ?? 0) + 1);
    const hist = new Array<number>(row.length).fill(0);
    for (let i = 0; i < 60_000; i++) {
      const s = new SequenceSampler({ ...params, seed: i });
      for (const t of history) s.accept(t);
      hist[s.sample(row).token]++;
    }
    expectMatches(hist, referenceDistribution(row, params, counts));
  });

  it("logit_bias -100 bans a token and +100 forces one", () => {
    const row = Float32Array.from([5, 0, 0, 1]);
    const banned = histogram(row, { logit_bias: { "0": -100 } }, 20_000);
    expect(banned[0]).toBe(0);
    expectMatches(banned, softmax([-95, 0, 0, 1]));
    expect(histogram(row, { logit_bias: { "2": 100 } }, 5000)[2]).toBe(5000);
    expect(new SequenceSampler({ temperature: 0, logit_bias: { "0": -100 } }).sample(row).token).toBe(3);
    expect(new SequenceSampler({ temperature: 0, logit_bias: { "1": 100 } }).sample(row).token).toBe(1);
    // Ids beyond the row are ignored.
    expect(new SequenceSampler({ temperature: 0, logit_bias: { "99": 100 } }).sample(row).token).toBe(0);
  });

  it("never draws a token whose logit is -Infinity or NaN", () => {
    const row = new Float32Array(300).fill(-Infinity);
    for (let i = 100; i < 300; i += 2) row[i] = (i % 7) * 0.1;
    row[150] = Number.NaN;
    for (const params of [{}, { top_p: 0.999 }, { min_p: 1e-12 }, { top_k: 250 }, { top_k: 250, top_p: 0.9999, min_p: 1e-9 }]) {
      const counts = histogram(row, { ...params, temperature: 2 }, 5000);
      for (let i = 0; i < 300; i++) if (!(row[i] > -Infinity)) expect(counts[i]).toBe(0);
    }
    expect(new SequenceSampler({ seed: 1 }).sample(new Float32Array(4).fill(-Infinity)).token).toBe(0);
    expect(new SequenceSampler({ seed: 1 }).sample(Float32Array.from([0, Infinity, 1, Infinity])).token).toBe(1);
  });

  it("leaves the logits as they were", () => {
    const row = randomLogits(1000, 3);
    const copy = row.slice();
    const s = new SequenceSampler({ logit_bias: { "5": 30, "6": -30 }, presence_penalty: 2, frequency_penalty: -2, seed: 1 });
    for (let i = 0; i < 20; i++) s.accept(5);
    for (let i = 0; i < 50; i++) {
      s.sample(row);
      expect(row).toEqual(copy);
    }
  });
});

describe("SequenceSampler: logprobs", () => {
  it("are the log-softmax of the raw logits, with the top alternatives sorted", () => {
    const row = randomLogits(5000, 12, 3);
    row[10] = row[11] = 50; // a tie at the top: lower id first
    const reference = logSoftmax(row);
    const order = reference.map((_, i) => i).sort((a, b) => reference[b] - reference[a] || a - b);
    const s = new SequenceSampler({
      logprobs: true,
      top_logprobs: 5,
      temperature: 0.4,
      top_p: 0.9,
      presence_penalty: 1,
      logit_bias: { "7": 100 },
      seed: 3,
    });
    for (let step = 0; step < 5; step++) {
      const r = s.sample(row);
      expect(r.token).toBe(7); // forced by the bias, yet its logprob is the raw one
      expect(r.logprob).toBeCloseTo(reference[7], 6);
      expect(r.top!.map((t) => t.token)).toEqual(order.slice(0, 5));
      expect(r.top![0].token).toBe(10);
      for (const t of r.top!) expect(t.logprob).toBeCloseTo(reference[t.token], 6);
      for (let i = 1; i < 5; i++) expect(r.top![i].logprob).toBeLessThanOrEqual(r.top![i - 1].logprob);
    }
  });

  it("top is empty without top_logprobs, and absent without logprobs", () => {
    const row = Float32Array.from([1, 2, 3]);
    const r = new SequenceSampler({ logprobs: true, temperature: 0 }).sample(row);
    expect(r.token).toBe(2);
    expect(r.top).toEqual([]);
    expect(r.logprob).toBeCloseTo(logSoftmax(row)[2], 6);
    expect(new SequenceSampler({ temperature: 0 }).sample(row)).toEqual({ token: 2 });
  });

  it("top_logprobs larger than the vocabulary returns the whole vocabulary", () => {
    const row = Float32Array.from([1, 3, 2]);
    const r = new SequenceSampler({ logprobs: true, top_logprobs: 20 }).sample(row);
    expect(r.top!.map((t) => t.token)).toEqual([1, 2, 0]);
    const total = r.top!.reduce((a, t) => a + Math.exp(t.logprob), 0);
    expect(total).toBeCloseTo(1, 6);
  });

  it("tokens a constraint masked out (-inf) are never listed: fewer entries when fewer tokens are allowed", () => {
    const row = Float32Array.from([1, -Infinity, 3, -Infinity, -Infinity]);
    const r = new SequenceSampler({ logprobs: true, top_logprobs: 4, temperature: 0 }).sample(row);
    expect(r.top!.map((t) => t.token)).toEqual([2, 0]);
    for (const t of r.top!) expect(Number.isFinite(t.logprob)).toBe(true);
  });
});

describe("selection routines", () => {
  const rng = Xoshiro128ss.fromSeed(99);
  const makeArrays = (n: number, distinct: number) => {
    const vals = new Float64Array(n);
    const ids = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      vals[i] = Math.floor(rng.nextFloat() * distinct) / distinct;
      ids[i] = i;
    }
    return { vals, ids };
  };

  it("selectTop moves the k largest to the front", () => {
    for (const [n, k, distinct] of [
      [1000, 10, 1e9],
      [1000, 999, 1e9],
      [5000, 40, 7],
      [300, 17, 3],
      [20, 5, 1],
    ]) {
      const { vals, ids } = makeArrays(n, distinct);
      const before = Array.from(vals);
      selectTop(vals, ids, n, k);
      const sorted = [...before].sort((a, b) => b - a);
      expect([...vals.slice(0, k)].sort((a, b) => b - a)).toEqual(sorted.slice(0, k));
      // ids still travel with their values
      for (let i = 0; i < n; i++) expect(vals[i]).toBe(before[ids[i]]);
    }
  });

  it("selectNucleus keeps the smallest top set reaching the target", () => {
    for (const [n, distinct] of [
      [2000, 1e9],
      [2000, 13],
      [100, 2],
      [17, 1e9],
    ]) {
      for (const fraction of [0.01, 0.3, 0.9, 0.999, 1.5]) {
        const { vals, ids } = makeArrays(n, distinct);
        for (let i = 0; i < n; i++) vals[i] += 1e-3; // positive weights
        const before = Array.from(vals);
        const total = before.reduce((a, b) => a + b, 0);
        const target = fraction * total;
        const m = selectNucleus(vals, ids, n, target);
        const sorted = [...before].sort((a, b) => b - a);
        let cum = 0;
        let expected = 0;
        while (expected < n && cum < target) cum += sorted[expected++];
        expect(m).toBe(expected);
        expect([...vals.slice(0, m)].sort((a, b) => b - a)).toEqual(sorted.slice(0, m));
        for (let i = 0; i < n; i++) expect(vals[i]).toBe(before[ids[i]]);
      }
    }
  });
});
