/**
 * The text worker thread's entry: it owns one text session and the samplers of its open sequences,
 * applies each step message's slot operations in order, runs the forward pass and samples. It never
 * decides who runs.
 */
import type { TextLoadResult, RowSample, SequenceFailure, SlotOp, StepRequest, StepResult, TextWorkerRequest } from "./protocol.js";
import { applyTokenMask, GrammarClient, ThinkingBudgetMatcher, TokenSetMatcher, type TokenMatcher } from "../constrain/index.js";
import { scorePositions, SequenceSampler, type PositionScores } from "../sampling/index.js";
import { TextSession } from "./session.js";
import { poolChunk } from "./pooling.js";
import { runDeviceStep } from "./webgpu-step.js";
import { WebGpuTextSession } from "./webgpu-session.js";

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** The thread's whole state: one text session, the samplers of its open sequences, and their constraints' matchers. */
class TextThreadState {
  session: TextSession | WebGpuTextSession | null = null;
  readonly samplers = new Map<number, SequenceSampler>();
  readonly matchers = new Map<number, TokenMatcher>();
  /** The model's grammar threads by lane, where its constraints' matchers live; each connected before the first sequence opens on it. */
  readonly grammars: GrammarClient[] = [];

  reset(): void {
    this.samplers.clear();
    for (const m of this.matchers.values()) m.dispose();
    this.matchers.clear();
  }

  /** The ids a free-text (null) mask bans (every grammar thread's engine bans the same: they read one tokenizer). */
  freeTextBans(): Int32Array {
    const grammar = this.grammars.find((g) => g !== undefined);
    if (!grammar) throw new Error("worker: a free-text mask without a grammar thread");
    return grammar.freeTextBans;
  }

  requireSession(): TextSession | WebGpuTextSession {
    if (!this.session) throw new Error("worker: no model loaded");
    return this.session;
  }

  /** The matcher of a sequence being opened: its constraint's, its `allowed_token_ids`, its thinking budget, some of them, or none. */
  private openMatcher(op: Extract<SlotOp, { op: "open" }>, logitsWidth: number): TokenMatcher | undefined {
    const grammar = op.constraint ? this.grammars[op.grammarLane ?? 0] : undefined;
    if (op.constraint && !grammar) throw new Error(`no grammar thread is connected on lane ${op.grammarLane ?? 0} for a constrained sequence`);
    const constraint = op.constraint ? grammar!.open(op.seqId, op.constraint) : undefined;
    const allowed = op.sampling.allowed_token_ids;
    const held = allowed?.length ? new TokenSetMatcher(allowed, logitsWidth, constraint, grammar?.freeTextBans) : constraint;
    return op.thinkingBudget ? new ThinkingBudgetMatcher(op.thinkingBudget, logitsWidth, held) : held;
  }

  /** Applies slot operations in order; one that fails fails only the sequence it names. */
  async applyOps(ops: readonly SlotOp[], failed: SequenceFailure[]): Promise<void> {
    const session = this.requireSession();
    const kv = session.kv;
    for (const op of ops) {
      try {
        if (op.op === "open") {
          kv.truncate(op.slot, op.keepCached);
          this.samplers.set(op.seqId, new SequenceSampler(op.sampling, { stream: op.stream, promptIds: op.promptIds, endIds: session.manifest.stopTokenIds }));
          this.matchers.get(op.seqId)?.dispose();
          this.matchers.delete(op.seqId);
          const matcher = this.openMatcher(op, session.vocab);
          if (matcher) this.matchers.set(op.seqId, matcher);
        } else if (op.op === "copy") {
          await kv.copyPrefix(op.from, op.to, op.length);
        } else {
          this.samplers.delete(op.seqId);
          this.matchers.get(op.seqId)?.dispose();
          this.matchers.delete(op.seqId);
        }
      } catch (err) {
        if (op.op === "copy") kv.truncate(op.to, 0); // what it holds now is nobody's prefix
        if (op.op !== "close" && op.seqId !== undefined) failed.push({ seqId: op.seqId, message: `${op.op} failed: ${messageOf(err)}` });
      }
    }
  }

  /**
   * Samples a draft's positions in turn (see {@link StepRequest.verify}): each sample is kept, and
   * the next position sampled, while it equals the draft token after it. A constrained sequence's
   * mask follows each kept sample, as it does between decode steps.
   */
  private async confirmDraft(
    req: StepRequest,
    samplePosition: (position: number) => RowSample | null,
    masks: Map<number, Int32Array | null>,
    failed: SequenceFailure[],
  ): Promise<RowSample[]> {
    const seqId = req.seqIds[0];
    const kept: RowSample[] = [];
    for (let p = 0; p < req.tokensPerRow; p++) {
      const matcher = this.matchers.get(seqId);
      if (p > 0 && matcher) {
        try {
          setMask(masks, seqId, await matcher.nextMask());
        } catch (err) {
          failed.push({ seqId, message: `the constraint failed: ${messageOf(err)}` });
          break;
        }
      }
      const sample = samplePosition(p);
      if (!sample) break;
      kept.push(sample);
      if (p + 1 === req.tokensPerRow || sample.token !== req.tokens[p + 1]) break;
    }
    return kept;
  }

  async step(req: StepRequest): Promise<StepResult> {
    const failed: SequenceFailure[] = [];
    await this.applyOps(req.ops, failed);
    if (req.rows === 0) return { samples: [], failed, runMs: 0, sampleMs: 0 };
    const session = this.requireSession();
    if (session instanceof WebGpuTextSession) {
      // The device applies the masks, so they are computed before its forward pass.
      const masks = await nextMasks(this.matchers, req, failed);
      const ctx = { session, samplers: this.samplers, matchers: this.matchers, freeTextBans: () => this.freeTextBans() };
      return runDeviceStep(ctx, req, masks, failed);
    }
    const t0 = performance.now();
    const cachedBefore = session.kv.lengths[req.firstSlot];
    let logits: Float32Array;
    let masks: Map<number, Int32Array | null>;
    try {
      // Masks are asked for once the forward pass has been started: the grammar thread computes them
      // while this thread runs the model.
      const forward = session.forward(req.firstSlot, req.rows, req.tokensPerRow, req.tokens, req.score !== undefined || req.verify === true);
      forward.catch(() => {}); // handled by the await below; never an unhandled rejection meanwhile
      masks = await nextMasks(this.matchers, req, failed);
      logits = await forward;
    } catch (err) {
      return { samples: [], failed, forwardError: messageOf(err), runMs: performance.now() - t0, sampleMs: 0 };
    }
    const t1 = performance.now();
    const vocab = session.vocab;
    const gone = new Set(failed.map((f) => f.seqId));
    const sharedRows = new Set(req.forks?.map((f) => f.row) ?? []);
    // Scoring computed every position's logits: a row samples from its last position's.
    const perRow = req.score ? req.tokensPerRow : 1;
    const rowLogits = (row: number) => logits.subarray(((row + 1) * perRow - 1) * vocab, (row + 1) * perRow * vocab);
    // Scored before sampling, which may mask a row in place.
    const scores = req.score && !gone.has(req.seqIds[req.score.row]) ? scoreChunk(logits, vocab, req, req.score) : undefined;
    const pooled =
      req.embed && !gone.has(req.seqIds[req.embed.row])
        ? poolChunk(session.lastHidden, req.embed.row, req.tokensPerRow, session.manifest.shape.hidden, req.embed.pooling)
        : undefined;
    const sampleRow = (row: number, seqId: number) => sampleLogits(rowLogits(row), seqId, sharedRows.has(row));
    const sampleLogits = (rowLogits: Float32Array, seqId: number, shared: boolean): RowSample | null => {
      if (gone.has(seqId)) return null;
      const sampler = this.samplers.get(seqId);
      if (!sampler) {
        failed.push({ seqId, message: `sequence ${seqId} is not open on the worker` });
        gone.add(seqId);
        return null;
      }
      const mask = masks.get(seqId);
      let sample: RowSample;
      if (mask === undefined) {
        sample = sampler.sample(rowLogits);
      } else if (mask === null) {
        // Free text: the few ids the engine never allows are banned in place and restored, rather
        // than copying and masking the whole row.
        sample = sampleWithBans(sampler, rowLogits, this.freeTextBans());
      } else {
        // Masked in place when no other sequence samples this row; a copy when one does (n > 1), so it sees the row unmasked.
        const masked = shared ? rowLogits.slice() : rowLogits;
        applyTokenMask(masked, mask);
        sample = sampler.sample(masked);
      }
      const matcher = this.matchers.get(seqId);
      if (matcher && !matcher.accept(sample.token)) {
        failed.push({ seqId, message: `the constraint refused token ${sample.token}` });
        gone.add(seqId);
        return null;
      }
      return sample;
    };
    if (req.verify) {
      const confirmed = await this.confirmDraft(
        req,
        (position) => sampleLogits(logits.subarray(position * vocab, (position + 1) * vocab), req.seqIds[0], false),
        masks,
        failed,
      );
      session.kv.truncate(req.firstSlot, cachedBefore + confirmed.length);
      return { samples: [confirmed[0] ?? null], confirmed: confirmed.slice(1), failed, runMs: t1 - t0, sampleMs: performance.now() - t1 };
    }
    const samples: Array<RowSample | null> = [];
    for (let r = 0; r < req.rows; r++) {
      const top = req.sample[r] && req.topLogits ? topLogits(rowLogits(r), req.topLogits) : undefined;
      const sample = req.sample[r] ? sampleRow(r, req.seqIds[r]) : null;
      if (sample && top) sample.topLogits = top;
      samples.push(sample);
    }
    // The sampler restores the row it was given, so further sequences can sample the same logits.
    const forkSamples = req.forks?.map(({ row, seqId }) => sampleRow(row, seqId));
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
}

/** The scores a prefill chunk asked for: each position against the prompt token after it. */
function scoreChunk(logits: Float32Array, vocab: number, req: StepRequest, score: NonNullable<StepRequest["score"]>): PositionScores {
  const first = score.row * req.tokensPerRow;
  const targets = new Int32Array(score.next >= 0 ? req.tokensPerRow : req.tokensPerRow - 1);
  targets.set(req.tokens.subarray(first + 1, first + req.tokensPerRow));
  if (score.next >= 0) targets[req.tokensPerRow - 1] = score.next;
  return scorePositions(logits.subarray(first * vocab), vocab, targets, score.top, score.ranks === true);
}

/** Samples `row` with the logits of `bans` at -Infinity, then puts them back (other samplers may share the row). */
function sampleWithBans(sampler: SequenceSampler, row: Float32Array, bans: Int32Array): RowSample {
  const saved = new Float32Array(bans.length);
  let n = 0;
  for (; n < bans.length && bans[n] < row.length; n++) {
    saved[n] = row[bans[n]];
    row[bans[n]] = -Infinity;
  }
  try {
    return sampler.sample(row);
  } finally {
    for (let i = 0; i < n; i++) row[bans[i]] = saved[i];
  }
}

/**
 * Masks of the constrained sequences this call samples for, by sequence id (null: free text, see
 * TokenMatcher.nextMask); a matcher that fails fails only its sequence.
 */
async function nextMasks(matchers: Map<number, TokenMatcher>, req: StepRequest, failed: SequenceFailure[]): Promise<Map<number, Int32Array | null>> {
  const masks = new Map<number, Int32Array | null>();
  const ids = new Set([...req.seqIds.filter((_, r) => req.sample[r]), ...(req.forks?.map((f) => f.seqId) ?? [])]);
  // Asked for all at once: the grammar thread answers them in turn while none waits for another's round trip.
  const asked = [...ids].flatMap((seqId) => {
    const matcher = matchers.get(seqId);
    return matcher ? [{ seqId, mask: matcher.nextMask() }] : [];
  });
  for (const { seqId, mask } of asked) {
    try {
      setMask(masks, seqId, await mask);
    } catch (err) {
      failed.push({ seqId, message: `the constraint failed: ${messageOf(err)}` });
    }
  }
  return masks;
}

/** Records a sequence's mask for this step; a matcher that holds nothing this step leaves it unmasked. */
function setMask(masks: Map<number, Int32Array | null>, seqId: number, mask: Int32Array | null | undefined): void {
  if (mask === undefined) masks.delete(seqId);
  else masks.set(seqId, mask);
}

function topLogits(row: Float32Array, n: number): Array<{ token: number; logit: number }> {
  const best: Array<{ token: number; logit: number }> = [];
  for (let i = 0; i < row.length; i++) {
    if (best.length < n || row[i] > best[best.length - 1].logit) {
      best.push({ token: i, logit: row[i] });
      best.sort((a, b) => b.logit - a.logit);
      if (best.length > n) best.pop();
    }
  }
  return best;
}

const state = new TextThreadState();

/** Piscina task entry: one request in, one result out. */
export default async function handle(req: TextWorkerRequest): Promise<TextLoadResult | StepResult | null> {
  if (req.op === "step") return state.step(req);
  if (req.op === "grammar") {
    state.grammars[req.lane] = await GrammarClient.connect(req.port);
    return null;
  }
  await state.session?.release();
  state.reset();
  state.session =
    req.options.device === "webgpu" ? await WebGpuTextSession.load(req.artifactDir, req.options) : await TextSession.load(req.artifactDir, req.options);
  const m = state.session.manifest;
  const device = state.session instanceof WebGpuTextSession ? "webgpu" : "cpu";
  return { shape: m.shape, artifactId: m.id, stopTokenIds: m.stopTokenIds, slots: state.session.kv.slots, device };
}
