/**
 * A served text model's speed on this machine, measured through its engine as requests see it:
 * the time to the first token of a prompt, the prompt's tokens per second, and the engine's decode
 * step at each number of concurrent sequences (`kiln bench`).
 */
import type { StepRecord } from "../engine/engine-stats.js";
import type { GenerationRequest } from "../types.js";
import type { ServedModel } from "./served-model.js";

/** What {@link measureThroughput} runs. */
export interface ThroughputPlan {
  /** Prompt tokens of the time-to-first-token request. */
  promptTokens: number;
  /** Concurrent sequences of each decode measurement, e.g. [1, 16, 64]. */
  rows: readonly number[];
  /** Tokens each sequence decodes in one decode measurement. */
  steps: number;
  /** Repetitions of every measurement; the figures are their medians. */
  runs: number;
  /** Prompt tokens each decoding sequence starts from. Default 64. */
  decodeContext?: number;
}

/** The engine's decode step with `rows` sequences decoding and none prefilling. */
export interface DecodeFigures {
  rows: number;
  /** Median wall-clock milliseconds of such a step: the worker's call, sampling and scheduling. */
  msPerStep: number;
  /** Tokens the step makes per second: rows x 1000 / msPerStep. */
  tokensPerSecond: number;
  /** Steps measured, over every run. */
  samples: number;
}

export interface ThroughputFigures {
  prompt: {
    tokens: number;
    /** Median milliseconds from submitting the prompt to its first token. */
    ttftMs: number;
    /** Prompt tokens computed per second in the prefill steps of those requests. */
    tokensPerSecond: number;
  };
  decode: DecodeFigures[];
}

/** A paragraph to build prompts of any length from: ordinary text, as a user's would be. */
const PROSE =
  "The lighthouse keeper on Marrow Island kept two notebooks. In the first he wrote the weather every six hours: wind from the north-east, a falling glass, fog that came in low over the rocks. In the second he wrote down the ships he saw, their names when he could read them, and where they were bound. ";

/** `tokens` prompt tokens of ordinary text, different for each `seed` from its first token on (so no prompt shares a cached prefix with another). */
export function benchPrompt(model: Pick<ServedModel, "textPrompt">, tokens: number, seed: number): number[] {
  let text = `Log ${seed}. ${PROSE}`;
  let ids = model.textPrompt(text);
  while (ids.length < tokens) {
    text += PROSE;
    ids = model.textPrompt(text);
  }
  return ids.slice(0, tokens);
}

/**
 * Runs `plan` on `model` and returns its medians, after one unrecorded warm-up round. Requests go
 * through the engine one measurement at a time; the model's end tokens are biased out, so every
 * sequence decodes `steps` tokens. A decode step counts at `rows` only when exactly that many
 * sequences decoded in it and no prompt was computed beside them. The model should serve with
 * prefix reuse off and at least max(rows) slots.
 */
export async function measureThroughput(model: ServedModel, plan: ThroughputPlan): Promise<ThroughputFigures> {
  const sampling = { temperature: 0, logit_bias: Object.fromEntries(model.engine.stopTokenIds.map((id) => [String(id), -100])) };
  const context = plan.decodeContext ?? 64;
  const steps: StepRecord[] = [];
  const stop = model.engine.stats.observe({ onStep: (s) => steps.push(s) });
  let seed = 0;
  try {
    const ttft: number[] = [];
    let prefillTokens = 0;
    let prefillSeconds = 0;
    const decode = new Map<number, number[]>();
    // Run -1 warms up, unrecorded: a session's first call of each shape pays for its kernels and
    // buffers (on a GPU, its pipelines), which is not the speed asked for.
    for (let run = -1; run < plan.runs; run++) {
      const record = run >= 0;
      steps.length = 0;
      const first = await drain(model, { promptIds: benchPrompt(model, plan.promptTokens, seed++), maxTokens: 1, sampling });
      if (record) {
        ttft.push(first);
        for (const s of steps) {
          prefillTokens += s.prefillTokens;
          prefillSeconds += s.prefillTokens > 0 ? s.seconds : 0;
        }
      }
      for (const rows of plan.rows) {
        steps.length = 0;
        const requests = Array.from({ length: rows }, () => ({ promptIds: benchPrompt(model, context, seed++), maxTokens: plan.steps, sampling }));
        await Promise.all(requests.map((r) => drain(model, r)));
        if (!record) continue;
        const ms = steps.filter((s) => s.decodeRows === rows && s.prefillTokens === 0).map((s) => s.seconds * 1000);
        decode.set(rows, [...(decode.get(rows) ?? []), ...ms]);
      }
    }
    return {
      prompt: { tokens: plan.promptTokens, ttftMs: median(ttft), tokensPerSecond: prefillSeconds > 0 ? prefillTokens / prefillSeconds : 0 },
      decode: plan.rows.map((rows) => {
        const ms = decode.get(rows) ?? [];
        const msPerStep = median(ms);
        return { rows, msPerStep, tokensPerSecond: ms.length > 0 ? (rows * 1000) / msPerStep : 0, samples: ms.length };
      }),
    };
  } finally {
    stop();
  }
}

/** Runs a request to its end; returns the milliseconds to its first token (or its end, when it makes none). */
async function drain(model: ServedModel, request: GenerationRequest): Promise<number> {
  const t0 = performance.now();
  let first: number | undefined;
  for await (const event of model.engine.submit(request))
    if (first === undefined && (event.type === "delta" || event.type === "finish")) first = performance.now();
  return (first ?? performance.now()) - t0;
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
