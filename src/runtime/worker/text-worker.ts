/**
 * The worker thread's entry: it owns one model session and the samplers of its open sequences,
 * applies each step message's slot operations in order, runs the forward pass and samples. It never
 * decides who runs.
 */
import type { LoadResult, RowSample, SequenceFailure, SlotOp, StepRequest, StepResult, WorkerRequest } from "../step-protocol.js";
import { SequenceSampler } from "../sampling/index.js";
import { ModelSession } from "./model-session.js";

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** The worker's whole state: one model session and the samplers of its open sequences. */
class WorkerState {
  session: ModelSession | null = null;
  readonly samplers = new Map<number, SequenceSampler>();

  requireSession(): ModelSession {
    if (!this.session) throw new Error("worker: no model loaded");
    return this.session;
  }

  /** Applies slot operations in order; one that fails fails only the sequence it names. */
  applyOps(ops: readonly SlotOp[], failed: SequenceFailure[]): void {
    const kv = this.requireSession().kv;
    for (const op of ops) {
      try {
        if (op.op === "open") {
          kv.truncate(op.slot, op.keepCached);
          this.samplers.set(op.seqId, new SequenceSampler(op.sampling, { stream: op.stream }));
        } else if (op.op === "copy") {
          kv.copyPrefix(op.from, op.to, op.length);
        } else {
          this.samplers.delete(op.seqId);
        }
      } catch (err) {
        if (op.op === "copy") kv.truncate(op.to, 0); // what it holds now is nobody's prefix
        if (op.op !== "close" && op.seqId !== undefined) failed.push({ seqId: op.seqId, message: `${op.op} failed: ${messageOf(err)}` });
      }
    }
  }

  async step(req: StepRequest): Promise<StepResult> {
    const failed: SequenceFailure[] = [];
    this.applyOps(req.ops, failed);
    if (req.rows === 0) return { samples: [], failed, runMs: 0, sampleMs: 0 };
    const session = this.requireSession();
    const t0 = performance.now();
    let logits: Float32Array;
    try {
      logits = await session.forward(req.firstSlot, req.rows, req.seq, req.tokens);
    } catch (err) {
      return { samples: [], failed, forwardError: messageOf(err), runMs: performance.now() - t0, sampleMs: 0 };
    }
    const t1 = performance.now();
    const vocab = session.vocab;
    const gone = new Set(failed.map((f) => f.seqId));
    const sampleRow = (row: number, seqId: number): RowSample | null => {
      if (gone.has(seqId)) return null;
      const sampler = this.samplers.get(seqId);
      if (!sampler) {
        failed.push({ seqId, message: `sequence ${seqId} is not open on the worker` });
        gone.add(seqId);
        return null;
      }
      return sampler.sample(logits.subarray(row * vocab, (row + 1) * vocab));
    };
    const samples: Array<RowSample | null> = [];
    for (let r = 0; r < req.rows; r++) {
      const top = req.sample[r] && req.topLogits ? topLogits(logits.subarray(r * vocab, (r + 1) * vocab), req.topLogits) : undefined;
      const sample = req.sample[r] ? sampleRow(r, req.seqIds[r]) : null;
      if (sample && top) sample.topLogits = top;
      samples.push(sample);
    }
    // The sampler restores the row it was given, so further sequences can sample the same logits.
    const forkSamples = req.forks?.map(({ row, seqId }) => sampleRow(row, seqId));
    return { samples, ...(forkSamples ? { forkSamples } : {}), failed, runMs: t1 - t0, sampleMs: performance.now() - t1 };
  }
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

const state = new WorkerState();

/** Piscina task entry: one request in, one result out. */
export default async function handle(req: WorkerRequest): Promise<LoadResult | StepResult> {
  if (req.op === "step") return state.step(req);
  await state.session?.release();
  state.samplers.clear();
  state.session = await ModelSession.load(req.artifactDir, req.options);
  const m = state.session.manifest;
  return { shape: m.shape, artifactId: m.id, stopTokenIds: m.stopTokenIds, slots: state.session.kv.slots };
}
