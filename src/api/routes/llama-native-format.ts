/**
 * llama.cpp server's own answer shape for `/completion` and `/infill`: one object with the text,
 * why it stopped (`stop_type`: `eos`, `word` with the `stopping_word`, `limit`), the counts and the
 * `timings`; streamed, `data:` events of `{content, stop: false}` and a last one with `stop: true`
 * and everything else.
 */
import type { EmittedTokenLogprob, ServedModel } from "../../scheduler/index.js";
import type { Usage } from "../protocol/chat-completions.js";
import type { AnswerFormat, CollectedChoice } from "./generation.js";

export interface NativeFormatOptions {
  /** When the request arrived (`performance.now()` milliseconds). */
  startedAt: number;
  /** The prompt's text, as the answer repeats it. */
  prompt: string;
  /** What the request asked of sampling, as `generation_settings` reports it. */
  settings: Record<string, unknown>;
  /** Alternatives to report beside each token (`n_probs`); 0: no `completion_probabilities`. */
  probs: number;
  /** Only these paths of the final answer (`response_fields`), or null for all of it. */
  fields: readonly string[] | null;
}

interface NativeProb {
  id: number;
  token: string;
  bytes: number[];
  logprob: number;
  top_logprobs: Array<{ id: number; token: string; bytes: number[]; logprob: number }>;
}

export function nativeFormat(model: ServedModel, options: NativeFormatOptions): AnswerFormat {
  let firstTokenAt: number | null = null;
  let lastTokenAt = 0;
  let ending: { type: "eos" | "word" | "limit"; word: string } = { type: "eos", word: "" };
  const partial = (content: string, logprobs?: EmittedTokenLogprob[]) => ({
    index: 0,
    content,
    tokens: [],
    stop: false,
    id_slot: 0,
    ...(options.probs > 0 && logprobs?.length ? { completion_probabilities: nativeProbs(logprobs, options.probs) } : {}),
  });
  const final = (content: string, usage: Usage, decodeMs: number) => {
    const cached = usage.prompt_tokens_details.cached_tokens;
    const totalMs = performance.now() - options.startedAt;
    const promptMs = Math.max(0, totalMs - decodeMs);
    const promptN = usage.prompt_tokens - cached;
    const predictedN = usage.completion_tokens;
    return {
      index: 0,
      content,
      tokens: [],
      id_slot: 0,
      stop: true,
      model: model.slug,
      tokens_predicted: predictedN,
      tokens_evaluated: usage.prompt_tokens,
      generation_settings: options.settings,
      prompt: options.prompt,
      has_new_line: content.includes("\n"),
      truncated: false,
      stop_type: ending.type,
      stopping_word: ending.word,
      tokens_cached: usage.prompt_tokens + predictedN,
      timings: {
        cache_n: cached,
        prompt_n: promptN,
        prompt_ms: promptMs,
        prompt_per_token_ms: promptN > 0 ? promptMs / promptN : 0,
        prompt_per_second: promptMs > 0 ? (1000 * promptN) / promptMs : 0,
        predicted_n: predictedN,
        predicted_ms: decodeMs,
        predicted_per_token_ms: predictedN > 0 ? decodeMs / predictedN : 0,
        predicted_per_second: decodeMs > 0 ? (1000 * predictedN) / decodeMs : 0,
      },
    };
  };
  const endOf = (reason: CollectedChoice["finishReason"], stopReason: string | number | undefined) => {
    if (reason === "length") return { type: "limit" as const, word: "" };
    return typeof stopReason === "string" ? { type: "word" as const, word: stopReason } : { type: "eos" as const, word: "" };
  };
  return {
    framing: { end: "last-event", failure: (error) => [{ error: { code: error.status, message: error.message, type: "server_error" } }] },
    start: () => null,
    delta: (_index, text, logprobs) => {
      const now = performance.now();
      firstTokenAt ??= now;
      lastTokenAt = now;
      return partial(text, logprobs);
    },
    finish: (_index, reason, stopReason) => {
      ending = endOf(reason, stopReason);
      return [];
    },
    usage: (usage) => selected(final("", usage, firstTokenAt === null ? 0 : lastTokenAt - firstTokenAt), options.fields),
    complete: (choices: CollectedChoice[], usage: Usage) => {
      const choice = choices[0];
      ending = endOf(choice.finishReason, choice.stopReason);
      const answer = final(choice.text, usage, (choice.decodeSeconds ?? 0) * 1000);
      return selected(options.probs > 0 ? { ...answer, completion_probabilities: nativeProbs(choice.logprobs, options.probs) } : answer, options.fields);
    },
  };
}

/**
 * llama.cpp's `response_fields`: each path (`timings/prompt_n`) that leads to a value, under the path
 * itself as its key, as llama.cpp flattens them; paths that lead nowhere are left out.
 */
function selected(answer: Record<string, unknown>, paths: readonly string[] | null): Record<string, unknown> {
  if (paths === null) return answer;
  const out: Record<string, unknown> = {};
  for (const path of paths) {
    let value: unknown = answer;
    for (const key of path.split("/"))
      value = value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>)[key] : undefined;
    if (value !== undefined) out[path] = value;
  }
  return out;
}

function nativeProbs(entries: readonly EmittedTokenLogprob[], top: number): NativeProb[] {
  return entries.map((e) => ({
    id: e.id,
    token: e.token,
    bytes: e.bytes,
    logprob: e.logprob,
    top_logprobs: e.top.slice(0, top).map((t) => ({ id: t.id, token: t.token, bytes: t.bytes, logprob: t.logprob })),
  }));
}
