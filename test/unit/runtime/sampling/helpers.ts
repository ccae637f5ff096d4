import { Xoshiro128ss } from "../../../../src/runtime/sampling/prng.js";

/** Deterministic normal-ish logits for tests. */
export function randomLogits(vocab: number, seed: number, scale = 2): Float32Array {
  const rng = Xoshiro128ss.fromSeed(seed);
  const out = new Float32Array(vocab);
  for (let i = 0; i < vocab; i++) {
    // Box-Muller
    const u = 1 - rng.nextFloat();
    const v = rng.nextFloat();
    out[i] = scale * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
  return out;
}

export function softmax(xs: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < xs.length; i++) max = Math.max(max, xs[i]);
  const e = Array.from(xs, (x) => Math.exp(x - max));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

export function logSoftmax(xs: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < xs.length; i++) max = Math.max(max, xs[i]);
  let z = 0;
  for (let i = 0; i < xs.length; i++) z += Math.exp(xs[i] - max);
  const lse = max + Math.log(z);
  return Array.from(xs, (x) => x - lse);
}

export interface RefParams {
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  logit_bias?: Record<string, number>;
}

/**
 * The documented pipeline written the slow, obvious way (full sort): the exact distribution the
 * sampler should draw from.
 */
export function referenceDistribution(raw: ArrayLike<number>, p: RefParams, counts = new Map<number, number>()): number[] {
  const l = Array.from(raw, (x) => Math.fround(x));
  for (const [k, b] of Object.entries(p.logit_bias ?? {})) l[Number(k)] = Math.fround(l[Number(k)] + b);
  for (const [t, c] of counts) l[t] = Math.fround(l[t] - ((p.presence_penalty ?? 0) * (c > 0 ? 1 : 0) + (p.frequency_penalty ?? 0) * c));
  const out = new Array<number>(l.length).fill(0);
  const t = p.temperature ?? 1;
  if (t === 0) {
    let best = 0;
    for (let i = 1; i < l.length; i++) if (l[i] > l[best]) best = i;
    out[best] = 1;
    return out;
  }
  let order = l.map((_, i) => i).sort((a, b) => l[b] - l[a] || a - b);
  if (p.top_k && p.top_k > 0) order = order.slice(0, p.top_k);
  const probs = softmax(order.map((i) => l[i] / t));
  let keep = order.length;
  if (p.top_p !== undefined && p.top_p < 1) {
    let cum = 0;
    keep = 0;
    while (keep < order.length) {
      cum += probs[keep++];
      if (cum >= p.top_p) break;
    }
    keep = Math.max(keep, 1);
  }
  let kept = order.slice(0, keep).map((id, j) => [id, probs[j]] as const);
  if (p.min_p) {
    const pmax = kept[0][1];
    kept = kept.filter(([, q]) => q >= p.min_p! * pmax);
  }
  const z = kept.reduce((a, [, q]) => a + q, 0);
  for (const [id, q] of kept) out[id] = q / z;
  return out;
}

/**
 * Pearson chi-square of observed counts against expected probabilities. Returns the statistic,
 * the degrees of freedom, and how many draws fell where the probability is 0.
 */
export function chiSquare(observed: ArrayLike<number>, probs: ArrayLike<number>): { chi2: number; dof: number; impossible: number } {
  let n = 0;
  for (let i = 0; i < observed.length; i++) n += observed[i];
  let chi2 = 0;
  let cells = 0;
  let impossible = 0;
  for (let i = 0; i < probs.length; i++) {
    const e = probs[i] * n;
    if (probs[i] === 0) {
      impossible += observed[i];
      continue;
    }
    cells++;
    chi2 += (observed[i] - e) ** 2 / e;
  }
  return { chi2, dof: Math.max(cells - 1, 1), impossible };
}

/** A generous acceptance bound for chi-square with `dof` degrees of freedom (about 6 sigma). */
export function chiBound(dof: number): number {
  return dof + 6 * Math.sqrt(2 * dof) + 10;
}
