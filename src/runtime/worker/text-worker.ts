import type { LoadResult, RowSample, StepRequest, StepResult, WorkerRequest } from "../step-protocol.js";
import { SequenceSampler } from "../sampling/index.js";
import { TextModel } from "../text-model.js";

/** The worker's whole state: one model and the samplers of its open sequences. */
class WorkerState {
  model: TextModel | null = null;
  readonly samplers = new Map<number, SequenceSampler>();

  requireModel(): TextModel {
    if (!this.model) throw new Error("worker: no model loaded");
    return this.model;
  }

  async step(req: StepRequest): Promise<StepResult> {
    const model = this.requireModel();
    const t0 = performance.now();
    const logits = await model.forward(req.firstSlot, req.rows, req.seq, req.tokens);
    const t1 = performance.now();
    const vocab = model.vocab;
    const samples: Array<RowSample | null> = [];
    for (let r = 0; r < req.rows; r++) {
      if (!req.sample[r]) {
        samples.push(null);
        continue;
      }
      const row = logits.subarray(r * vocab, (r + 1) * vocab);
      const top = req.topLogits ? topLogits(row, req.topLogits) : undefined;
      const sampler = this.samplers.get(req.seqIds[r]);
      if (!sampler) throw new Error(`worker: sequence ${req.seqIds[r]} is not open`);
      samples.push({ ...sampler.sample(row), topLogits: top });
    }
    // The sampler restores the row it was given, so further sequences can sample the same logits.
    const forkSamples = req.forks?.map(({ row, seqId }) => {
      const sampler = this.samplers.get(seqId);
      if (!sampler) throw new Error(`worker: sequence ${seqId} is not open`);
      return sampler.sample(logits.subarray(row * vocab, (row + 1) * vocab));
    });
    return { samples, ...(forkSamples ? { forkSamples } : {}), runMs: t1 - t0, sampleMs: performance.now() - t1 };
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
export default async function handle(req: WorkerRequest): Promise<unknown> {
  switch (req.op) {
    case "load": {
      await state.model?.release();
      state.model = await TextModel.load(req.artifactDir, req.options);
      const m = state.model.manifest;
      const result: LoadResult = { shape: m.shape, artifactId: m.id, stopTokenIds: m.stopTokenIds, slots: state.model.kv.slots };
      return result;
    }
    case "open": {
      const model = state.requireModel();
      model.kv.truncate(req.slot, req.keepCached);
      state.samplers.set(req.seqId, new SequenceSampler(req.sampling, { stream: req.stream ?? 0 }));
      return null;
    }
    case "copy":
      state.requireModel().kv.copyPrefix(req.from, req.to, req.length);
      return null;
    case "step":
      return state.step(req);
    case "close":
      state.samplers.delete(req.seqId);
      return null;
  }
}
