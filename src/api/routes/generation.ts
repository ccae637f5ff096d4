/**
 * Drives one generation for a route: submits it to the model's engine, cancels it when the client
 * goes away (its {@link RequestLife}), and answers either with one JSON body or as a stream of
 * server-sent events. The endpoint-specific shapes come from an {@link AnswerFormat}; this file owns
 * the flow and what the metrics and the usage record count.
 */
import { setMaxListeners } from "node:events";
import type { FastifyReply, FastifyRequest } from "fastify";
import type {
  EmittedTokenLogprob,
  FinishReason,
  GenerationEvent,
  GenerationRequest,
  GenerationStream,
  PromptTokenLogprob,
  ServedModel,
} from "../../scheduler/index.js";
import type { AdmissionRequest, SettledFrom } from "../cloud-port.js";
import type { ApiContext } from "../context.js";
import { usageOf, type Usage } from "../protocol/chat-completions.js";
import { streamSse, type SseFraming, type SseSink } from "../sse.js";
import { enginePriority } from "./generation-request.js";
import { assertUsageKept, CLIENT_CLOSED_STATUS, RequestLife } from "./request-life.js";

/** One choice as collected for a non-streamed answer. */
export interface CollectedChoice {
  index: number;
  text: string;
  logprobs: EmittedTokenLogprob[];
  /** Its scored prompt, when the request asked for it. */
  promptLogprobs: PromptTokenLogprob[] | null;
  finishReason: FinishReason;
  /** The request's stop string or stop token id that ended the choice (vLLM's `stop_reason`); absent when none did. */
  stopReason?: string | number;
  completionTokens: number;
  /** Seconds from the choice's first token to its last. */
  decodeSeconds?: number;
}

/** vLLM's `stop_reason` on a choice, present only when the request's own stop string or stop token ended it. */
export function stopReasonField(stopReason: string | number | undefined): { stop_reason?: string | number } {
  return stopReason === undefined ? {} : { stop_reason: stopReason };
}

/** The endpoint-specific wire shapes (chat, legacy completions, or the Responses API). */
export interface AnswerFormat {
  /** Streaming: how events are framed and how the stream ends (the Responses API names its events and has no [DONE]). Default: `data:` events, then `data: [DONE]`. */
  framing?: SseFraming;
  /** Streaming: events sent at once, before the generation's first event (the Responses API's `response.created`). Default none. */
  begin?(): unknown[];
  /**
   * Streaming: the chunk that opens a choice (chat's role chunk, the echoed prompt with its
   * scores when they were asked for); null for none.
   */
  start(choice: number, prompt?: PromptTokenLogprob[]): unknown | null;
  /** Streaming: the chunk for a piece of text of one choice, or a list of chunks (chat's tool calls), possibly empty. */
  delta(choice: number, text: string, logprobs: EmittedTokenLogprob[] | undefined): unknown;
  /** Streaming: the chunk that closes a choice, or a list ending with it (what a tool-call parser held back comes first). */
  finish(choice: number, reason: "stop" | "length", stopReason?: string | number): unknown;
  /**
   * Streaming: the usage chunk (`choices: []`), or the event or list of events that close the stream
   * with the usage (the Responses API's `response.completed`, the Messages API's `message_delta` and `message_stop`), or a promise of it.
   */
  usage(usage: Usage): unknown;
  /** The whole non-streamed answer (or a promise of it). */
  complete(choices: CollectedChoice[], usage: Usage): unknown;
}

/** What one API answer generates: its prompts' requests to the engine, and how it is answered. */
export interface AnswerPlan {
  model: ServedModel;
  /**
   * One request per prompt, submitted together so that they share the engine's steps; the
   * choices of `requests[i]` are numbered i * n + choice, as the reference API numbers them.
   */
  requests: GenerationRequest[];
  /** Answer with server-sent events. */
  stream: boolean;
  /** Streaming: send the format's usage event at the end (chat's usage chunk before [DONE]; the Responses API's closing event, always). */
  includeUsage: boolean;
  /** Streaming: every chunk that has a `usage` field carries the usage so far (vLLM's `continuous_usage_stats`). Default false. */
  continuousUsage?: boolean;
  /** Unique id of the answer (`chatcmpl-…`, `cmpl-…`), also the usage record's key. */
  answerId: string;
}

/** The usage a streamed chunk carries with `continuous_usage_stats`, as vLLM writes it. */
interface RunningUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Collects metrics of one request as its events go by. */
class Tracker {
  private ttft: number | undefined;
  private readonly perToken: number[] = [];
  private decodeSeconds = 0;
  private decodeTokens = 0;
  /** Tokens generated per choice so far: a delta counts them before the finish does, so a stream cut short is charged for every token produced. */
  private readonly produced = new Map<number, number>();
  /** Prompt tokens each finished choice found in the prefix cache. */
  private readonly cached = new Map<number, number>();
  /** Predicted output tokens confirmed and not, over the finished choices. */
  private readonly prediction = { accepted: 0, rejected: 0 };
  /** Whether a choice ended cancelled (by its client leaving, or by the drain deadline). */
  stoppedEarly = false;

  constructor(private readonly reply: FastifyReply) {}

  get completionTokens(): number {
    let sum = 0;
    for (const n of this.produced.values()) sum += n;
    return sum;
  }

  see(event: GenerationEvent): void {
    if (event.type === "prompt" || event.type === "embedding") return;
    this.produced.set(event.choice, Math.max(this.produced.get(event.choice) ?? 0, event.completionTokens));
    if (event.type === "delta") {
      this.ttft ??= this.reply.elapsedTime / 1000;
      return;
    }
    if (event.reason === "cancelled") this.stoppedEarly = true;
    this.cached.set(event.choice, event.cachedPromptTokens);
    if (event.prediction) {
      this.prediction.accepted += event.prediction.accepted;
      this.prediction.rejected += event.prediction.rejected;
    }
    if (event.completionTokens >= 2) {
      this.perToken.push(event.decodeSeconds / (event.completionTokens - 1));
      this.decodeSeconds += event.decodeSeconds;
      this.decodeTokens += event.completionTokens - 1;
    }
  }

  record(ctx: ApiContext, life: RequestLife, plan: AnswerPlan, settledFrom: SettledFrom): Usage {
    const promptTokens = plan.requests.reduce((sum, r) => sum + r.promptIds.length, 0);
    ctx.metrics.generation({
      model: plan.model.slug,
      artifactId: plan.model.artifactId,
      promptTokens,
      completionTokens: this.completionTokens,
      ttftSeconds: this.ttft,
      perTokenSeconds: this.perToken,
      decodeSeconds: this.decodeSeconds,
      decodeTokens: this.decodeTokens,
      cancelled: settledFrom === "cancelled",
    });
    life.recordUsage({ slug: plan.model.slug, artifactId: plan.model.artifactId, promptTokens, completionTokens: this.completionTokens }, settledFrom);
    return usageOf(promptTokens, this.completionTokens, this.cachedPromptTokens(plan), this.prediction);
  }

  /**
   * Prompt tokens served from the prefix cache, each prompt counted once as `prompt_tokens` counts
   * it: for its choices (numbered prompt × n + choice), the most any of them found cached.
   */
  private cachedPromptTokens(plan: AnswerPlan): number {
    const n = plan.requests[0]?.n ?? 1;
    const perPrompt = new Map<number, number>();
    for (const [choice, cached] of this.cached) {
      const prompt = Math.floor(choice / n);
      perPrompt.set(prompt, Math.max(perPrompt.get(prompt) ?? 0, cached));
    }
    let sum = 0;
    for (const cached of perPrompt.values()) sum += cached;
    return sum;
  }
}

/**
 * One submitted generation: its events, cancelled at once when the client goes away or the drain
 * deadline passes, and its metrics and usage, recorded once however the answer ends.
 */
class Generation {
  private readonly life: RequestLife;
  private readonly events: AsyncIterator<GenerationEvent>;
  private readonly tracker: Tracker;
  private usage: Usage | null = null;

  /** Submits the plan's requests; throws what the engine throws (a full queue, a closed engine) with nothing to record. */
  constructor(
    private readonly ctx: ApiContext,
    request: FastifyRequest,
    reply: FastifyReply,
    private readonly plan: AnswerPlan,
  ) {
    this.tracker = new Tracker(reply);
    // Stopped short when a choice ended cancelled: an abort after the last event cuts nothing.
    this.life = new RequestLife(ctx, request, reply, plan.answerId, () => this.tracker.stoppedEarly);
    const streams: GenerationStream[] = [];
    // Each prompt's stream listens on the one signal: many listeners here are by design.
    setMaxListeners(plan.requests.length + 10, this.life.signal);
    try {
      for (const r of plan.requests) {
        const priority = enginePriority(request, r.priority);
        streams.push(plan.model.engine.submit(priority === undefined ? r : { ...r, priority }, this.life.signal));
      }
    } catch (err) {
      // All or none: the prompts queued before a refusal leave the queue with it; nothing is recorded.
      this.life.abort();
      this.life.end(() => {});
      throw err;
    }
    this.events = mergeEvents(streams, plan.requests[0]?.n ?? 1);
  }

  /** Whether the client went away before the generation was over. */
  get clientLeft(): boolean {
    return this.life.clientLeft;
  }

  /** Tokens so far: the prompts', and those generated up to the last event read. */
  usageSoFar(): RunningUsage {
    const promptTokens = this.plan.requests.reduce((sum, r) => sum + r.promptIds.length, 0);
    const completionTokens = this.tracker.completionTokens;
    return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
  }

  /** Throws the answer's error when the drain deadline ended the generation (its events stop short, as if cancelled). */
  assertNotCutOff(): void {
    const error = this.life.cutOffError();
    if (error) throw error;
  }

  async next(): Promise<IteratorResult<GenerationEvent>> {
    let r: IteratorResult<GenerationEvent>;
    try {
      r = await this.events.next();
    } catch (err) {
      this.life.failed();
      throw err;
    }
    if (!r.done) this.tracker.see(r.value);
    return r;
  }

  /**
   * Cancels what is left of the generation (when the answer failed before its end, so that nothing
   * runs for a reader that is gone) and ends its life: the metrics and usage are recorded. Only the
   * first call does anything; every call returns the usage.
   */
  end(): Usage {
    if (this.usage) return this.usage;
    void this.events.return?.();
    this.life.end((settledFrom) => (this.usage = this.tracker.record(this.ctx, this.life, this.plan, settledFrom)));
    return this.usage!;
  }
}

/** Runs `plan` and answers with one JSON body or, when it asks to stream, with server-sent events. */
export async function answerGeneration(
  ctx: ApiContext,
  request: FastifyRequest,
  reply: FastifyReply,
  plan: AnswerPlan,
  format: AnswerFormat,
): Promise<unknown> {
  assertUsageKept(ctx);
  await ctx.cloud?.admit(request, reply, admissionOf(plan));
  let generation: Generation;
  try {
    generation = new Generation(ctx, request, reply, plan);
  } catch (err) {
    await ctx.cloud?.release(plan.answerId);
    throw err;
  }
  try {
    if (!plan.stream) return await wholeAnswer(generation, reply, format);
    await streamSse(reply, ctx.sse, (sse) => streamAnswer(generation, sse, format, plan.includeUsage, plan.continuousUsage), format.framing);
    return reply;
  } finally {
    generation.end();
  }
}

/** What a generation asks to be admitted for: its prompts, and the most tokens its choices may produce. */
function admissionOf(plan: AnswerPlan): AdmissionRequest {
  return {
    requestId: plan.answerId,
    slug: plan.model.slug,
    artifactId: plan.model.artifactId,
    promptTokens: plan.requests.reduce((sum, r) => sum + r.promptIds.length, 0),
    maxCompletionTokens: plan.requests.reduce((sum, r) => sum + r.maxTokens * (r.n ?? 1), 0),
    audioMs: 0,
  };
}

/** The non-streamed answer: every event collected into choices. */
async function wholeAnswer(generation: Generation, reply: FastifyReply, format: AnswerFormat): Promise<unknown> {
  const choices = new Map<number, CollectedChoice>();
  for (let r = await generation.next(); !r.done; r = await generation.next()) collect(choices, r.value);
  const usage = generation.end();
  generation.assertNotCutOff();
  if (generation.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
  return format.complete(
    [...choices.values()].sort((a, b) => a.index - b.index),
    usage,
  );
}

/** The streamed answer: each event as its chunks, each sent once the client has room for it, then the usage chunk. */
async function streamAnswer(generation: Generation, sse: SseSink, format: AnswerFormat, includeUsage: boolean, continuousUsage = false): Promise<void> {
  for (const event of format.begin?.() ?? []) await sse.send(event);
  const started = new Set<number>();
  for (let r = await generation.next(); !r.done; r = await generation.next()) {
    const chunks = chunksOf(r.value, format, started);
    for (const chunk of continuousUsage ? withUsageSoFar(chunks, generation.usageSoFar()) : chunks) await sse.send(chunk);
  }
  const usage = generation.end();
  generation.assertNotCutOff();
  // A format may finish asynchronously (the Responses API stores the response before its closing event).
  if (includeUsage) for (const event of asList(await format.usage(usage))) await sse.send(event);
}

/** The chunks with their `usage` field set to the usage so far (prompt, and tokens generated up to them). */
function withUsageSoFar(chunks: unknown[], usage: RunningUsage): unknown[] {
  for (const chunk of chunks) if (chunk !== null && typeof chunk === "object" && "usage" in chunk) (chunk as { usage: unknown }).usage = { ...usage };
  return chunks;
}

/** The wire chunks of one event: a choice's opening chunk before its first event, then its delta or finish (a cancelled choice gets none). */
function chunksOf(event: GenerationEvent, format: AnswerFormat, started: Set<number>): unknown[] {
  const chunks: unknown[] = [];
  if (!started.has(event.choice)) {
    started.add(event.choice);
    const opening = format.start(event.choice, event.type === "prompt" ? event.logprobs : undefined);
    if (opening !== null) chunks.push(opening);
  }
  if (event.type === "delta") {
    if (event.text !== "" || (event.logprobs?.length ?? 0) > 0) pushChunks(chunks, format.delta(event.choice, event.text, event.logprobs));
  } else if (event.type === "finish" && event.reason !== "cancelled") {
    pushChunks(chunks, format.finish(event.choice, event.reason, event.stopReason));
  }
  return chunks;
}

/** A format gives one chunk (an object) or a list of them. */
function pushChunks(chunks: unknown[], produced: unknown): void {
  chunks.push(...asList(produced));
}

function asList(produced: unknown): unknown[] {
  return Array.isArray(produced) ? (produced as unknown[]) : [produced];
}

function collect(choices: Map<number, CollectedChoice>, event: GenerationEvent): void {
  let choice = choices.get(event.choice);
  if (!choice) {
    choice = { index: event.choice, text: "", logprobs: [], promptLogprobs: null, finishReason: "stop", completionTokens: 0 };
    choices.set(event.choice, choice);
  }
  if (event.type === "prompt") {
    choice.promptLogprobs = event.logprobs;
  } else if (event.type === "embedding") {
    return; // generations never ask for one
  } else if (event.type === "delta") {
    choice.text += event.text;
    if (event.logprobs) choice.logprobs.push(...event.logprobs);
  } else {
    choice.finishReason = event.reason;
    if (event.stopReason !== undefined) choice.stopReason = event.stopReason;
    choice.completionTokens = event.completionTokens;
    choice.decodeSeconds = event.decodeSeconds;
  }
}

/**
 * The events of the streams of several prompts as one stream, in the order they come, each choice
 * renumbered prompt-major (stream i's choice j is i * n + j). Each stream has at most one event in
 * flight, so a slow reader still holds back every prompt's choices.
 */
function mergeEvents(streams: GenerationStream[], n: number): AsyncIterator<GenerationEvent> {
  const iterators = streams.map((s) => s[Symbol.asyncIterator]());
  if (iterators.length === 1) return iterators[0];
  type Pulled = { i: number; r: IteratorResult<GenerationEvent> } | { i: number; r: null; error: unknown };
  const pending = new Map<number, Promise<Pulled>>();
  // Rejections become values: a failure is thrown once, and the other streams' never go unhandled.
  const pull = (i: number) =>
    pending.set(
      i,
      iterators[i].next().then(
        (r) => ({ i, r }),
        (error: unknown) => ({ i, r: null, error }),
      ),
    );
  iterators.forEach((_, i) => pull(i));
  return {
    async next() {
      while (pending.size > 0) {
        const pulled = await Promise.race(pending.values());
        const { i, r } = pulled;
        pending.delete(i);
        if (r === null) {
          pending.clear();
          throw (pulled as { error: unknown }).error;
        }
        if (r.done) continue;
        pull(i);
        return { done: false, value: { ...r.value, choice: i * n + r.value.choice } };
      }
      return { done: true, value: undefined };
    },
    async return() {
      pending.clear();
      await Promise.all(iterators.map((it) => it.return?.()));
      return { done: true, value: undefined };
    },
  };
}
