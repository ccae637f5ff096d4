/**
 * The only writer of server-sent events: one `data: <json>` line and a blank line per event, no
 * `event:` lines (they confuse the OpenAI Node client), `: keep-alive` comments while idle, and the
 * two ways a stream ends: `data: [DONE]`, or a `data: {"error": …}` event after which the stream
 * just closes.
 */
import { PassThrough } from "node:stream";
import type { FastifyReply } from "fastify";
import type { ErrorBody } from "./errors.js";

export interface SseOptions {
  /** Milliseconds of silence after which a `: keep-alive` comment is sent. Default 15000; 0 = never. */
  keepAliveMs?: number;
}

export class SseWriter {
  private readonly stream = new PassThrough();
  private ended = false;
  private timer: NodeJS.Timeout | null = null;

  private constructor(private readonly keepAliveMs: number) {}

  /** Sends the response head (200, text/event-stream) and returns the writer for its body. */
  static open(reply: FastifyReply, options: SseOptions = {}): SseWriter {
    const writer = new SseWriter(options.keepAliveMs ?? 15_000);
    reply
      .code(200)
      .header("content-type", "text/event-stream")
      .header("cache-control", "no-cache")
      .header("x-accel-buffering", "no");
    void reply.send(writer.stream);
    writer.armKeepAlive();
    return writer;
  }

  /** Whether the stream can still be written (not ended, client still there). */
  get open(): boolean {
    return !this.ended && !this.stream.destroyed;
  }

  /** One `data:` event with `data` as JSON. */
  send(data: unknown): void {
    this.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  /** Ends the stream normally: `data: [DONE]`. */
  done(): void {
    this.write("data: [DONE]\n\n");
    this.end();
  }

  /** Ends the stream with an error event (a failure after the first byte). */
  fail(body: ErrorBody): void {
    this.write(`data: ${JSON.stringify(body)}\n\n`);
    this.end();
  }

  /** Ends the stream without a final event (the client went away). */
  end(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.ended) return;
    this.ended = true;
    if (!this.stream.destroyed) this.stream.end();
  }

  private write(text: string): void {
    if (!this.open) return;
    this.stream.write(text);
    this.armKeepAlive();
  }

  private armKeepAlive(): void {
    if (this.keepAliveMs <= 0) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.write(": keep-alive\n\n");
    }, this.keepAliveMs);
    this.timer.unref();
  }
}
