/**
 * A streaming client that stops reading pauses its generation: the server stops pulling events
 * once the response's buffers are full, the engine pauses the choice once its backlog is full, and
 * neither the server nor the engine holds the rest of the generation. Reading again resumes it.
 */
import net from "node:net";
import { Duplex } from "node:stream";
import { describe, expect, it, vi } from "vitest";
import { AUTH, fakeApp, fakeModel, sseEvents, SLUG, VOCAB } from "./fake-model.js";

/** One token of 32 KiB, so that the whole generation (~26 MB) dwarfs what the kernel's socket buffers take (~4 MB on loopback). */
const LONG_TOKEN = "lorem ipsum dolor sit amet, ".repeat(1171).slice(0, 32 * 1024);
const LONG_ID = VOCAB.length;
const TOKENS = 800;
/** Events the engine may queue for a choice before pausing it. */
const MAX_BACKLOG = 8;

/** Raw bytes of one HTTP exchange over a socket we can stop reading. */
function rawClient(port: number) {
  const socket = net.connect(port, "127.0.0.1");
  const chunks: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => chunks.push(chunk));
  const ended = new Promise<void>((resolve, reject) => {
    socket.once("end", resolve);
    socket.once("error", reject);
  });
  return { socket, ended, received: () => Buffer.concat(chunks) };
}

function post(path: string, payload: unknown): string {
  const body = JSON.stringify(payload);
  const head = [`POST ${path} HTTP/1.1`, "host: 127.0.0.1", "content-type: application/json", `authorization: ${AUTH.authorization}`, "connection: close"];
  return `${head.join("\r\n")}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** The body of a chunked HTTP/1.1 response. */
function dechunk(raw: Buffer): { head: string; body: string } {
  const split = raw.indexOf("\r\n\r\n");
  const head = raw.subarray(0, split).toString();
  const parts: Buffer[] = [];
  let at = split + 4;
  for (;;) {
    const eol = raw.indexOf("\r\n", at);
    const size = parseInt(raw.subarray(at, eol).toString(), 16);
    if (size === 0) break;
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return { head, body: Buffer.concat(parts).toString() };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("streaming to a slow reader", () => {
  it("pauses generation instead of buffering it, then finishes the stream once the client reads again", async () => {
    const fake = fakeModel({ vocab: [...VOCAB, LONG_TOKEN], script: Array(TOKENS).fill(LONG_ID), contextLength: 8192, maxBacklog: MAX_BACKLOG });
    const { app } = await fakeApp({ fake, sse: { keepAliveMs: 0 } });
    // Bytes this response holds in the server's memory: the SSE stream's buffers and the HTTP response's (its socket's included).
    let held = () => 0;
    app.addHook("onSend", async (_request, reply, payload) => {
      if (payload instanceof Duplex) held = () => payload.readableLength + payload.writableLength + reply.raw.writableLength;
      return payload;
    });
    const url = new URL(await app.listen({ port: 0, host: "127.0.0.1" }));
    const client = rawClient(Number(url.port));
    try {
      client.socket.pause();
      client.socket.write(post("/v1/chat/completions", { model: SLUG, messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: TOKENS }));

      await vi.waitFor(() => expect(fake.model.engine.stats.snapshot().paused).toBe(1), { timeout: 3000, interval: 10 });
      const computedAtPause = fake.backend.computed;
      await sleep(100);
      expect(fake.backend.computed).toBe(computedAtPause);
      expect(computedAtPause).toBeGreaterThan(0);
      expect(computedAtPause).toBeLessThan(TOKENS / 2);
      const eventBytes = LONG_TOKEN.length + 250;
      const heldAtPause = held();
      expect(heldAtPause).toBeLessThan(8 * eventBytes);
      const metrics = (await app.inject({ method: "GET", url: "/metrics" })).body;
      expect(metrics).toContain(`kiln_paused_sequences{model="${SLUG}"} 1\n`);

      client.socket.resume();
      await Promise.race([client.ended, sleep(4000).then(() => Promise.reject(new Error("the stream did not end")))]);
      const { head, body } = dechunk(client.received());
      expect(head).toMatch(/^HTTP\/1\.1 200/);
      const events = sseEvents(body) as any[];
      expect(events.at(-1)).toBe("[DONE]");
      const deltas = events.slice(1, -2).map((e) => e.choices[0].delta.content);
      expect(deltas).toHaveLength(TOKENS);
      expect(deltas.every((d) => d === LONG_TOKEN)).toBe(true);
      expect(events.at(-2).choices[0].finish_reason).toBe("length");
      expect(fake.backend.computed).toBe(TOKENS);
      expect(fake.model.engine.stats.snapshot().paused).toBe(0);
    } finally {
      client.socket.destroy();
      await app.close();
    }
  }, 10_000);
});
