/**
 * Drives one generation for a route: submits it to the model's engine, cancels it when the client
 * goes away, and answers either with one JSON body or as a stream of server-sent events. The
 * endpoint-specific shapes come from an {@link AnswerFormat}; this file owns the flow, the metrics
 * and the usage record.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { EmittedTokenLogprob, FinishReason, GenerationEvent, GenerationRequest, ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { toApiError } from "../errors.js";
import type { Usage } from "../protocol/chat-completions.js";
import { SseWriter } from "../sse.js";

/** One choice as collected for a non-streamed answer. */
export interface CollectedChoice {
  index: number;
  text: string;
  logprobs: EmittedTokenLogprob[];
  finishReason: FinishReason;
  completionTokens: number;
}

/** The endpoint-specific wire shapes (chat or legacy completions). */
export interface AnswerFormat {
  /** Streaming: the chunk that opens a choice (chat's role chunk); null for none. */
  start(choice: number): unknown | null;
  /** Streaming: a chunk of text of one choice. */
  delta(choice: number, text: string, logprobs: EmittedTokenLogprob[] | undefined): unknown;
  /** Streaming: the chunk that closes a choice. */
  finish(choice: number, reason: "stop" | "length"): unknown;
  /** Streaming: the usage chunk (`choices: []`). */
  usage(usage: Usage): unknown;
  /** The whole non-streamed answer. */
  complete(choices: CollectedChoice[], usage: Usage): unknown;
}

export interface GenerationJob {
  model: ServedModel;
  request: GenerationRequest;
  /** Answer with server-sent events. */
  stream: boolean;
  /** Streaming: send the usage chunk before [DONE]. */
  includeUsage: boolean;
  /** Unique id of the answer (`chatcmpl-…`, `cmpl-…`), also the usage record's key. */
  answerId: string;
}

/** Collects metrics of one request as its events go by. */
class Tracker {
  private ttft: number | undefined;
  private readonly perToken: number[] = [];
  private decodeSeconds = 0;
  private decodeTokens = 0;
  completionTokens = 0;
  cancelled = false;

  constructor(private readonly reply: FastifyReply) {}

  see(event: GenerationEvent): void {
    if (event.type === "delta") {
      this.ttft ??= this.reply.elapsedTime / 1000;
      return;
    }
    this.completionTokens += event.completionTokens;
    if (event.reason === "cancelled") this.cancelled = true;
    if (event.completionTokens >= 2) {
      this.perToken.push(event.decodeSeconds / (event.completionTokens - 1));
      this.decodeSeconds += event.decodeSeconds;
      this.decodeTokens += event.completionTokens - 1;
    }
  }

  record(ctx: ApiContext, request: FastifyRequest, job: GenerationJob): Usage {
    const promptTokens = job.request.promptIds.length;
    ctx.metrics.generation({
      model: job.model.slug,
      promptTokens,
      completionTokens: this.completionTokens,
      ttftSeconds: this.ttft,
      perTokenSeconds: this.perToken,
      decodeSeconds: this.decodeSeconds,
      decodeTokens: this.decodeTokens,
      cancelled: this.cancelled,
    });
    ctx.usage?.record({
      requestId: job.answerId,
      keyId: request.apiKey?.id ?? null,
      slug: job.model.slug,
      promptTokens,
      completionTokens: this.completionTokens,
    });
    return { prompt_tokens: promptTokens, completion_tokens: this.completionTokens, total_tokens: promptTokens + this.completionTokens };
  }
}

/** HTTP status recorded for a request whose client left before the answer (never sent to anyone). */
export const CLIENT_CLOSED_STATUS = 499;

export async function answerGeneration(
  ctx: ApiContext,
  request: FastifyRequest,
  reply: FastifyReply,
  job: GenerationJob,
  format: AnswerFormat,
): Promise<unknown> {
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.raw.writableFinished) controller.abort();
  };
  reply.raw.on("close", onClose);
  const tracker = new Tracker(reply);
  let events: AsyncIterator<GenerationEvent>;
  try {
    events = job.model.engine.submit(job.request, controller.signal)[Symbol.asyncIterator]();
  } catch (err) {
    reply.raw.off("close", onClose);
    throw err;
  }
  const next = async () => {
    const r = await events.next();
    if (!r.done) tracker.see(r.value);
    return r;
  };

  if (!job.stream) {
    const choices = new Map<number, CollectedChoice>();
    try {
      for (let r = await next(); !r.done; r = await next()) collect(choices, r.value);
    } catch (err) {
      reply.raw.off("close", onClose);
      tracker.cancelled = controller.signal.aborted;
      tracker.record(ctx, request, job);
      throw err;
    }
    reply.raw.off("close", onClose);
    const usage = tracker.record(ctx, request, job);
    if (controller.signal.aborted || tracker.cancelled) return reply.code(CLIENT_CLOSED_STATUS).send();
    return format.complete([...choices.values()].sort((a, b) => a.index - b.index), usage);
  }

  // Streaming. Anything that fails before the first event is still an ordinary JSON error.
  let first: IteratorResult<GenerationEvent>;
  try {
    first = await next();
  } catch (err) {
    reply.raw.off("close", onClose);
    tracker.record(ctx, request, job);
    throw err;
  }
  const sse = SseWriter.open(reply, ctx.sse);
  const started = new Set<number>();
  const send = (event: GenerationEvent) => {
    if (!started.has(event.choice)) {
      started.add(event.choice);
      const opening = format.start(event.choice);
      if (opening !== null) sse.send(opening);
    }
    if (event.type === "delta") {
      if (event.text !== "" || (event.logprobs?.length ?? 0) > 0) sse.send(format.delta(event.choice, event.text, event.logprobs));
    } else if (event.reason !== "cancelled") {
      sse.send(format.finish(event.choice, event.reason));
    }
  };
  try {
    for (let r = first; !r.done; r = await next()) send(r.value);
    const usage = tracker.record(ctx, request, job);
    if (tracker.cancelled || !sse.open) {
      sse.end();
    } else {
      if (job.includeUsage) sse.send(format.usage(usage));
      sse.done();
    }
  } catch (err) {
    tracker.record(ctx, request, job);
    const apiErr = toApiError(err, request.id);
    request.log.error({ err }, "generation failed after the stream started");
    sse.fail(apiErr.toBody());
  } finally {
    reply.raw.off("close", onClose);
  }
  return reply;
}

function collect(choices: Map<number, CollectedChoice>, event: GenerationEvent): void {
  let choice = choices.get(event.choice);
  if (!choice) {
    choice = { index: event.choice, text: "", logprobs: [], finishReason: "stop", completionTokens: 0 };
    choices.set(event.choice, choice);
  }
  if (event.type === "delta") {
    choice.text += event.text;
    if (event.logprobs) choice.logprobs.push(...event.logprobs);
  } else {
    choice.finishReason = event.reason;
    choice.completionTokens = event.completionTokens;
  }
}
