/**
 * The quality probe of a GPU artifact. Its graph never returns a position's whole distribution (the
 * logits stay on the device): per position it returns the log-normalizer, the masked logit of a
 * token asked for, and its 64 highest logits. So the held-out text's log-probabilities, hence the
 * perplexity ratio, are exact, top-1 agreement is exact, and the KL divergence from the reference is
 * taken over those 64 tokens and the rest of the vocabulary as one outcome: a lower bound of the
 * full KL (merging outcomes never raises it), tight where the mass sits in the top tokens.
 */
import { WebGpuTextSession, type DeviceStepInputs } from "../runtime/text-worker/webgpu-session.js";

/** One position of the held-out text as a GPU artifact scores it. */
export interface DevicePositionScores {
  /** Log-probability of the text's next token. */
  target: number;
  /** The highest-scoring tokens, best first, and their log-probabilities. */
  topIds: number[];
  topLogprobs: number[];
}

/** Positions per probe call. */
const CHUNK = 64;

const yieldToTimers = () => new Promise((resolve) => setImmediate(resolve));

/** Inputs of one unconstrained row scoring `targets` at each of its positions. */
function scoringInputs(words: number, targets: number[]): DeviceStepInputs {
  return {
    allPositions: true,
    tokenMask: new Int32Array(words).fill(-1),
    adjustIds: new BigInt64Array(1),
    adjustBias: new Float32Array(1),
    adjustRepetition: Float32Array.of(1),
    adjustSubtract: new Float32Array(1),
    scoreTargets: BigInt64Array.from(targets.map(BigInt)),
  };
}

/** Runs `tokens` through the GPU artifact in `dir` in chunks and hands each position's scores to `row`. */
export async function probeOnDevice(
  dir: string,
  tokens: readonly number[],
  threads: number,
  signal: AbortSignal,
  row: (position: number, scores: DevicePositionScores) => void,
): Promise<void> {
  const session = await WebGpuTextSession.load(dir, { threads, slots: 1, device: "webgpu", deviceKvPositions: tokens.length + 1 });
  try {
    const scored = tokens.length - 1;
    for (let from = 0; from < scored; from += CHUNK) {
      const seq = Math.min(CHUNK, scored - from);
      const out = await session.forward(0, 1, seq, tokens.slice(from, from + seq), scoringInputs(session.maskWords, tokens.slice(from + 1, from + 1 + seq)));
      for (let s = 0; s < seq; s++) {
        const norm = out.logNormalizer[s];
        const at = s * out.candidates;
        const ids = Array.from(out.candidateIds.subarray(at, at + out.candidates), Number).filter((id) => id >= 0);
        row(from + s, {
          target: out.targetLogits[s] - norm,
          topIds: ids,
          topLogprobs: ids.map((_, i) => out.candidateRaw[at + i] - norm),
        });
      }
      await yieldToTimers();
      signal.throwIfAborted();
    }
  } finally {
    await session.release();
  }
}

/**
 * KL divergence of `reference` (a full log-softmax row) from a position scored on the device, over
 * its top tokens and the rest of the vocabulary as one outcome (a lower bound of the full KL).
 */
export function topTokensKl(reference: Float32Array, scores: DevicePositionScores): number {
  let kl = 0;
  let refTop = 0;
  let candTop = 0;
  scores.topIds.forEach((id, i) => {
    const p = Math.exp(reference[id]);
    refTop += p;
    candTop += Math.exp(scores.topLogprobs[i]);
    kl += p * (reference[id] - scores.topLogprobs[i]);
  });
  const refRest = Math.max(0, 1 - refTop);
  const candRest = Math.max(1e-12, 1 - candTop);
  if (refRest > 0) kl += refRest * Math.log(refRest / candRest);
  return Math.max(0, kl);
}
