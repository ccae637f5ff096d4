/**
 * The only writer of streamed answers: server-sent events, one `data: <json>` line and a blank line
 * per event (or, for Ollama's routes, one line of JSON per event: {@link SseFraming.lines}),
 * `: keep-alive` comments while idle, and no `event:` lines (they confuse the OpenAI Node client's
 * chat streams) except on streams framed as named events (the Responses API's, whose clients read
 * `event: <type>`: see {@link SseFraming}). {@link streamSse} owns a stream's whole life, so that
 * every stream ends one of three ways: `data: [DONE]` (or the body's own last event: see
 * {@link SseEnd}), the failure's events (by default one `data: {"error": …}`) after which the stream
 * just closes, or nothing more when the client has gone.
 */
import { PassThrough } from "node:stream";
import type { FastifyReply } from "fastify";
import { ApiError, toApiError } from "./errors.js";

export interface SseOptions {
  /** Milliseconds of silence after which a `: keep-alive` comment is sent. Default 15000; 0 = never. */
  keepAliveMs?: number;
}

/** What a stream's body writes with. */
export interface SseSink {
  /**
   * Sends one `data:` event with `data` as JSON. Resolves once the stream can take more: at once
   * while the client keeps up, else when it has read what is buffered (or has gone), so a body that
   * awaits each send holds at most a buffer's worth for a slow client. A no-op once the client has gone.
   */
  send(data: unknown): Promise<void>;
}

/**
 * How a stream that went well ends: `data: [DONE]` (chat and completions chunks), or with the
 * body's last event and nothing after it (transcriptions: the reference API ends those with its
 * `transcript.text.done` event, and the official clients need no marker).
 */
export type SseEnd = "done-marker" | "last-event";

/** How a stream's events are framed and how it ends. */
export interface SseFraming {
  /** How a stream that went well ends. Default "done-marker". */
  end?: SseEnd;
  /** Each event that has a string `type` is named by it in an `event:` line before its `data:` line. Default false. */
  named?: boolean;
  /** The events that end a stream failing after its first event. Default one `{"error": …}` event (the API contract's). */
  failure?: (error: ApiError) => unknown[];
  /**
   * Newline-delimited JSON instead of server-sent events (Ollama's streams): each event one line of
   * JSON, `application/x-ndjson`, no keep-alive comments (a line that is not an event would break
   * its clients), and no end marker. Default false.
   */
  lines?: boolean;
}

/**
 * Answers `reply` with the server-sent events `body` sends. The response starts with the first
 * event, so a body that throws before sending anything throws here (the caller answers with an
 * ordinary JSON error). After that the stream ends with `data: [DONE]` when `body` resolves, with
 * an error event when it throws (logged; the event names the request id and nothing internal),
 * and with nothing more when the client has gone. Resolves once the stream is ended. `framing`
 * (or just its {@link SseEnd}) says how events are framed, how the stream ends, and its failure events.
 */
export async function streamSse(
  reply: FastifyReply,
  options: SseOptions,
  body: (sse: SseSink) => Promise<void>,
  framing: SseFraming | SseEnd = "done-marker",
): Promise<void> {
  const { end = "done-marker", named = false, failure, lines = false } = typeof framing === "string" ? { end: framing } : framing;
  const writer = new SseWriter(reply, lines ? 0 : (options.keepAliveMs ?? 15_000), named, lines);
  try {
    await body(writer);
  } catch (err) {
    if (!writer.started) throw err;
    const error = toApiError(err, reply.request.id);
    // An error the API meant to send (a shutdown cut-off) is news, not a failure with a stack to read.
    if (err instanceof ApiError) reply.request.log.info({ code: error.code, status: error.status }, `stream ended with an error event: ${error.message}`);
    else reply.request.log.error({ err }, "stream failed after its first event");
    writer.end((failure ? failure(error) : [error.toBody()]).map((event) => writer.frame(event)).join(""));
    return;
  }
  writer.end(end === "done-marker" && !lines ? "data: [DONE]\n\n" : "");
}

/** One response's event stream: a PassThrough that fastify pipes to the client, opened on the first event. */
class SseWriter implements SseSink {
  private readonly stream = new PassThrough();
  private ended = false;
  private timer: NodeJS.Timeout | null = null;
  private isStarted = false;

  constructor(
    private readonly reply: FastifyReply,
    private readonly keepAliveMs: number,
    private readonly named: boolean,
    private readonly lines = false,
  ) {}

  /** Whether the response has begun (its head is sent or on its way). */
  get started(): boolean {
    return this.isStarted;
  }

  /** Whether the client can still be written to. */
  get open(): boolean {
    return !this.ended && !this.stream.destroyed;
  }

  async send(data: unknown): Promise<void> {
    if (!this.started) this.start();
    if (!this.write(this.frame(data))) await this.drained();
  }

  /** One event as its frame: its `event:` line when events are named and it has a type, then its `data:` line. */
  frame(data: unknown): string {
    if (this.lines) return `${JSON.stringify(data)}\n`;
    const type = this.named ? (data as { type?: unknown } | null)?.type : undefined;
    return `${typeof type === "string" ? `event: ${type}\n` : ""}data: ${JSON.stringify(data)}\n\n`;
  }

  /** Ends the stream with `last`, which only a client still there gets. Later calls do nothing. */
  end(last: string): void {
    if (this.ended) return;
    if (!this.started) this.start();
    this.write(last);
    this.ended = true;
    this.disarmKeepAlive();
    if (!this.stream.destroyed) this.stream.end();
  }

  /** Sends the response head (200, text/event-stream or application/x-ndjson) with the stream as its body. */
  private start(): void {
    this.isStarted = true;
    this.reply
      .code(200)
      .header("content-type", this.lines ? "application/x-ndjson" : "text/event-stream")
      .header("cache-control", "no-cache")
      .header("x-accel-buffering", "no");
    void this.reply.send(this.stream);
    this.armKeepAlive();
  }

  /** Writes `text` if the client is there; false when the stream's buffer is full (wait for 'drain'). */
  private write(text: string): boolean {
    if (!this.open) return true;
    const roomLeft = this.stream.write(text);
    this.armKeepAlive();
    return roomLeft;
  }

  /** Resolves when the buffered events have gone to the client, or the client has gone. */
  private drained(): Promise<void> {
    if (!this.open) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.stream.off("drain", done);
        this.stream.off("close", done);
        resolve();
      };
      this.stream.on("drain", done);
      this.stream.on("close", done);
    });
  }

  private armKeepAlive(): void {
    if (this.keepAliveMs <= 0) return;
    this.disarmKeepAlive();
    this.timer = setTimeout(() => {
      this.timer = null;
      // A stream waiting for its client is not idle: the comment would only add to its buffer.
      if (this.stream.writableNeedDrain) this.armKeepAlive();
      else this.write(": keep-alive\n\n");
    }, this.keepAliveMs);
    this.timer.unref();
  }

  private disarmKeepAlive(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
