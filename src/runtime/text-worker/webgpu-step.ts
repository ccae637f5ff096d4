/**
 * A step message's forward pass and sampling on a GPU session: the constraint masks and each row's
 * logit adjustments go to the device with the tokens, and each sampled row is drawn from the
 * candidates that come back. The slot operations are the thread's, as on the CPU.
 */
import type { TokenMatcher } from "../constrain/index.js";
import type { CandidateRow, LogitAdjustments, PositionScores, SequenceSampler } from "../sampling/index.js";
import { poolChunk } from "./pooling.js";
import type { RowSample, SequenceFailure, StepRequest, StepResult } from "./protocol.js";
import type { DeviceStepInputs, DeviceStepOutputs, WebGpuTextSession } from "./webgpu-session.js";

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** What the step reads of the thread's state. */
export interface DeviceStepContext {
  session: WebGpuTextSession;
  samplers: Map<number, SequenceSampler>;
  matchers: Map<number, TokenMatcher>;
  /** The ids free text never allows (the constraint engine's), for a matcher's null mask. */
  freeTextBans: () => Int32Array;
}

/**
 * Runs the step's forward pass and samples every sampled row and fork from its candidates.
 * `masks` are the constrained sequences' next masks (null: free text), computed before the pass
 * because the device applies them.
 */
export async function runDeviceStep(
  ctx: DeviceStepContext,
  req: StepRequest,
  masks: Map<number, Int32Array | null>,
  failed: SequenceFailure[],
): Promise<StepResult> {
  const { session } = ctx;
  const t0 = performance.now();
  let out: DeviceStepOutputs;
  const inputs = deviceInputs(ctx, req, masks);
  const cachedBefore = session.kv.lengths[req.firstSlot];
  try {
    out = await session.forward(req.firstSlot, req.rows, req.tokensPerRow, req.tokens, inputs);
  } catch (err) {
    return { samples: [], failed, forwardError: messageOf(err), runMs: performance.now() - t0, sampleMs: 0 };
  }
  const t1 = performance.now();
  const vocab = session.vocab;
  const gone = new Set(failed.map((f) => f.seqId));
  const last = (row: number) => candidateRow(out, row, out.positions - 1);
  const sampleRow = (row: number, seqId: number, p = out.positions - 1): RowSample | null => {
    if (gone.has(seqId)) return null;
    const sampler = ctx.samplers.get(seqId);
    if (!sampler) {
      failed.push({ seqId, message: `sequence ${seqId} is not open on the worker` });
      gone.add(seqId);
      return null;
    }
    const sample: RowSample = sampler.sampleCandidates(candidateRow(out, row, p), vocab);
    const matcher = ctx.matchers.get(seqId);
    if (matcher && !matcher.accept(sample.token)) {
      failed.push({ seqId, message: `the constraint refused token ${sample.token}` });
      gone.add(seqId);
      return null;
    }
    return sample;
  };
  if (req.verify) {
    const confirmed = confirmDraft(ctx, req, (p) => sampleRow(0, req.seqIds[0], p));
    session.kv.truncate(req.firstSlot, cachedBefore + confirmed.length);
    return { samples: [confirmed[0] ?? null], confirmed: confirmed.slice(1), failed, runMs: t1 - t0, sampleMs: performance.now() - t1 };
  }
  const scores = req.score && !gone.has(req.seqIds[req.score.row]) ? scoreRow(out, req, req.score) : undefined;
  const samples: Array<RowSample | null> = [];
  for (let r = 0; r < req.rows; r++) {
    const sample = req.sample[r] ? sampleRow(r, req.seqIds[r]) : null;
    if (sample && req.topLogits) sample.topLogits = topLogits(out, r, out.positions - 1, req.topLogits);
    samples.push(sample);
  }
  // A fork shares its row's candidates: the choices of one request start with the same
  // adjustments (none generated yet) and the same constraint state, so the row's mask is theirs.
  const forkSamples = req.forks?.map(({ row, seqId }) => sampleRow(row, seqId));
  const pooled = req.embed && !gone.has(req.seqIds[req.embed.row]) ? pooledHidden(out, req.embed, session.manifest.shape.hidden) : undefined;
  return {
    samples,
    ...(forkSamples ? { forkSamples } : {}),
    ...(scores ? { scores } : {}),
    ...(pooled ? { pooled } : {}),
    failed,
    runMs: t1 - t0,
    sampleMs: performance.now() - t1,
  };
}

/** The device inputs of a step: per row its mask and adjustments (from its sequence), per position a scored target. */
function deviceInputs(ctx: DeviceStepContext, req: StepRequest, masks: Map<number, Int32Array | null>): DeviceStepInputs {
  const { session } = ctx;
  const rows = req.rows;
  const words = session.maskWords;
  const vocab = session.vocab;
  const tokenMask = new Int32Array(rows * words).fill(-1);
  const perRow = [];
  for (let r = 0; r < rows; r++) {
    const seqId = req.seqIds[r];
    const sampler = req.sample[r] ? ctx.samplers.get(seqId) : undefined;
    perRow.push(sampler ? sampler.logitAdjustments(vocab) : undefined);
    if (!req.sample[r] || !masks.has(seqId)) continue;
    const mask = masks.get(seqId)!;
    const row = tokenMask.subarray(r * words, (r + 1) * words);
    if (mask === null) {
      for (const id of ctx.freeTextBans()) if (id < vocab) row[id >>> 5] &= ~(1 << (id & 31));
    } else {
      row.set(mask.subarray(0, words));
    }
  }
  const n = Math.max(1, ...perRow.map((a) => a?.ids.length ?? 0));
  const adjustIds = new BigInt64Array(rows * n);
  const adjustBias = new Float32Array(rows * n);
  const adjustRepetition = new Float32Array(rows * n).fill(1);
  const adjustSubtract = new Float32Array(rows * n);
  for (let r = 0; r < rows; r++) {
    const a = perRow[r];
    if (!a || a.ids.length === 0) continue; // token 0, changed by nothing
    // Padding repeats the first entry whole, so a scatter of duplicates writes one value.
    for (let i = 0; i < n; i++) {
      const j = i < a.ids.length ? i : 0;
      adjustIds[r * n + i] = BigInt(a.ids[j]);
      adjustBias[r * n + i] = a.bias[j];
      adjustRepetition[r * n + i] = a.repetition[j];
      adjustSubtract[r * n + i] = a.subtract[j];
    }
  }
  // A draft's check, like a scored chunk, needs every position's candidates; a mean embedding, every position's hidden state.
  const every = req.score !== undefined || req.verify === true || req.embed?.pooling === "mean";
  const positions = every ? req.tokensPerRow : 1;
  const scoreTargets = new BigInt64Array(rows * positions);
  if (req.score) {
    const { row, next } = req.score;
    const first = row * req.tokensPerRow;
    for (let s = 0; s + 1 < req.tokensPerRow; s++) scoreTargets[row * positions + s] = BigInt(req.tokens[first + s + 1]);
    if (next >= 0) scoreTargets[row * positions + req.tokensPerRow - 1] = BigInt(next);
  }
  return {
    allPositions: every,
    tokenMask,
    adjustIds,
    adjustBias,
    adjustRepetition,
    adjustSubtract,
    scoreTargets,
    ...(req.embed ? { hidden: true } : {}),
  };
}

/** Row `row`'s part of its embedding, from the final hidden states the step brought back: of every position for "mean", of the last for "last". */
function pooledHidden(out: DeviceStepOutputs, embed: NonNullable<StepRequest["embed"]>, width: number): Float32Array {
  if (!out.hidden) throw new Error("the device step brought back no hidden states");
  return poolChunk(out.hidden, embed.row, out.positions, width, embed.pooling);
}

/**
 * Samples a draft's positions in turn (see StepRequest.verify), keeping each while it equals the
 * draft token after it. The device applied the row's mask and logit adjustments of the step's start
 * to every position, so a position is sampled only while they are still the sequence's: it stops
 * after the first for a constrained sequence (its mask moves with each token), and wherever a sample
 * changed the adjustments (penalties, a ban lifted by min_tokens). A stop there is a draft confirmed
 * shorter, never a token from another distribution.
 */
function confirmDraft(ctx: DeviceStepContext, req: StepRequest, samplePosition: (p: number) => RowSample | null): RowSample[] {
  const seqId = req.seqIds[0];
  const sampler = ctx.samplers.get(seqId);
  const vocab = ctx.session.vocab;
  // The sampler's state has not moved since the step's inputs were made: these are the adjustments the device applied.
  const applied = sampler ? adjustmentsKey(sampler.logitAdjustments(vocab)) : "";
  const kept: RowSample[] = [];
  for (let p = 0; p < req.tokensPerRow; p++) {
    const sample = samplePosition(p);
    if (!sample) break;
    kept.push(sample);
    if (p + 1 === req.tokensPerRow || sample.token !== req.tokens[p + 1]) break;
    if (ctx.matchers.has(seqId) || !sampler || adjustmentsKey(sampler.logitAdjustments(vocab)) !== applied) break;
  }
  return kept;
}

/** Logit adjustments as a comparable key: their entries that change anything, by token id. */
function adjustmentsKey(a: LogitAdjustments): string {
  const entries: string[] = [];
  for (let i = 0; i < a.ids.length; i++) {
    if (a.bias[i] !== 0 || a.repetition[i] !== 1 || a.subtract[i] !== 0) entries.push(`${a.ids[i]}:${a.bias[i]}:${a.repetition[i]}:${a.subtract[i]}`);
  }
  return entries.sort().join(",");
}

/**
 * How many of `ids` are tokens: the WebGPU provider's TopK reports a masked (-inf) entry as id -1
 * (with -FLT_MAX), and such entries come last.
 */
function tokensAmong(ids: Int32Array): number {
  let n = 0;
  while (n < ids.length && ids[n] >= 0) n++;
  return n;
}

/** Row `row`'s results at computed position `p`, as the sampler takes them (masked entries left out). */
function candidateRow(out: DeviceStepOutputs, row: number, p: number): CandidateRow {
  const at = row * out.positions + p;
  const k = tokensAmong(out.candidateIds.subarray(at * out.candidates, (at + 1) * out.candidates));
  const top = tokensAmong(out.topIds.subarray(at * out.top, (at + 1) * out.top));
  const from = at * out.candidates;
  return {
    ids: Array.from(out.candidateIds.subarray(from, from + k), Number),
    adjusted: out.candidateLogits.subarray(from, from + k),
    raw: out.candidateRaw.subarray(from, from + k),
    logNormalizer: out.logNormalizer[at],
    topIds: Array.from(out.topIds.subarray(at * out.top, at * out.top + top), Number),
    topLogits: out.topLogits.subarray(at * out.top, at * out.top + top),
  };
}

/** The scores a prompt chunk asked for, from the device's per-position target logits, alternatives and normalizers. */
function scoreRow(out: DeviceStepOutputs, req: StepRequest, score: NonNullable<StepRequest["score"]>): PositionScores {
  const n = score.next >= 0 ? req.tokensPerRow : req.tokensPerRow - 1;
  const k = Math.min(score.top, out.top);
  const result: PositionScores = {
    top: k,
    logprobs: new Float64Array(n),
    topIds: new Int32Array(n * k),
    topLogprobs: new Float64Array(n * k),
    ranks: new Int32Array(n),
  };
  const targetAt = (p: number) => (score.next >= 0 && p === req.tokensPerRow - 1 ? score.next : req.tokens[score.row * req.tokensPerRow + p + 1]);
  for (let p = 0; p < n; p++) {
    const at = score.row * out.positions + p;
    const lse = out.logNormalizer[at];
    result.logprobs[p] = out.targetLogits[at] - lse;
    const found = tokensAmong(out.topIds.subarray(at * out.top, (at + 1) * out.top));
    // The device returns its top tokens only: a rank beyond them is not counted.
    const target = targetAt(p);
    for (let i = 0; i < found; i++) if (Number(out.topIds[at * out.top + i]) === target) result.ranks[p] ||= i + 1;
    for (let i = 0; i < k; i++) {
      // As on the CPU: fewer tokens than asked read as impossible ones.
      result.topIds[p * k + i] = i < found ? Number(out.topIds[at * out.top + i]) : 0;
      result.topLogprobs[p * k + i] = i < found ? out.topLogits[at * out.top + i] - lse : -Infinity;
    }
  }
  return result;
}

/** The `n` (at most the device's top) highest masked logits of a row's last position, for oracle checks. */
function topLogits(out: DeviceStepOutputs, row: number, p: number, n: number): Array<{ token: number; logit: number }> {
  const at = row * out.positions + p;
  const best: Array<{ token: number; logit: number }> = [];
  const found = tokensAmong(out.topIds.subarray(at * out.top, (at + 1) * out.top));
  for (let i = 0; i < Math.min(n, found); i++) best.push({ token: Number(out.topIds[at * out.top + i]), logit: out.topLogits[at * out.top + i] });
  return best;
}
