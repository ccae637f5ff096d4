/**
 * Bounded waits, over real sockets: a request must arrive within the request timeout (a trickling
 * body gets 400 `request_timeout` and cannot hold a drain), answers are not timed (a stream may run
 * past it), a drain ends what still runs at its deadline (an error event, or a 503), and
 * connections beyond the cap are closed as they are accepted.
 */
import net from "node:net";
import { describe, expect, it, vi } from "vitest";
import { drainApp, type AppOptions } from "../../../src/api/app.js";
import { Lifecycle } from "../../../src/api/context.js";
import serve from "../../../src/cli/commands/serve.js";
import { capture } from "../cli/capture.js";
import { AUTH, fakeApp, fakeModel, sseEvents, SLUG, VOCAB, type FakeModel } from "./fake-model.js";

const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** 2000 tokens at 5 ms a step: a generation of 10 s or more, longer than any deadline here. */
const longModel = () => fakeModel({ script: Array(2000).fill(256), tokenDelayMs: 5, contextLength: 4096 });

async function listening(options: Partial<AppOptions> & { fake?: FakeModel } = {}) {
  const lifecycle = new Lifecycle();
  const { app, fake } = await fakeApp({ lifecycle, sse: { keepAliveMs: 0 }, ...options });
  const url = await app.listen({ port: 0, host: "127.0.0.1" });
  const port = (app.server.address() as net.AddressInfo).port;
  return { app, fake, lifecycle, url, port };
}

/** A raw connection that keeps everything it receives. */
function rawSocket(port: number) {
  const socket = net.connect(port, "127.0.0.1");
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  const connected = new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  return { socket, closed, connected, received: () => received };
}

/** Sends a chat request's headers and the first bytes of its body, then one more byte every `everyMs`, never finishing. */
function trickle(port: number, everyMs: number) {
  const raw = rawSocket(port);
  const body = JSON.stringify(chat());
  raw.socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nauthorization: ${AUTH.authorization}\r\n` +
      `x-request-id: trickler\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 5)}`,
  );
  let at = 5;
  const timer = setInterval(() => {
    if (at < body.length - 1 && !raw.socket.destroyed) raw.socket.write(body[at++]);
  }, everyMs);
  void raw.closed.then(() => clearInterval(timer));
  return { ...raw, stop: () => clearInterval(timer) };
}

/** The status line, headers and JSON body of a raw HTTP answer. */
function parseAnswer(raw: string) {
  const [head, body] = raw.split("\r\n\r\n");
  const [statusLine, ...headers] = head.split("\r\n");
  return {
    status: Number(statusLine.split(" ")[1]),
    headers: Object.fromEntries(headers.map((h) => [h.slice(0, h.indexOf(":")).toLowerCase(), h.slice(h.indexOf(":") + 1).trim()])),
    body: JSON.parse(body) as any,
  };
}

/** Resolves to how long `promise` took, or rejects when it takes longer than `limitMs`. */
async function timed(promise: Promise<unknown>, limitMs: number): Promise<number> {
  const t0 = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`still pending after ${limitMs} ms`)), limitMs)));
  try {
    await Promise.race([promise, limit]);
    return Date.now() - t0;
  } finally {
    clearTimeout(timer);
  }
}

describe("request timeout", () => {
  it("answers a trickling body with 400 request_timeout in the API's error shape, and does not hold a drain", async () => {
    const { app, lifecycle, port } = await listening({ requestTimeoutMs: 300, headersTimeoutMs: 300 });
    const client = trickle(port, 40);
    try {
      await vi.waitFor(() => expect(lifecycle.inFlight).toBe(1));
      // The drain deadline is far away: only the request timeout can end the trickler in time.
      const drained = drainApp(app, lifecycle, { timeoutMs: 20_000 });
      const closedAfter = await timed(client.closed, 3000);
      const answer = parseAnswer(client.received());
      expect(answer.status).toBe(400);
      expect(answer.headers["content-type"]).toMatch(/^application\/json/);
      expect(answer.headers["x-request-id"]).toBe("trickler");
      expect(answer.body).toEqual({
        error: { message: expect.stringContaining("did not arrive in time"), type: "invalid_request_error", param: null, code: "request_timeout" },
      });
      console.log(`trickling client answered and closed ${closedAfter} ms after the drain began (request timeout 300 ms)`);
      const drainedAfter = await timed(drained, 2000);
      console.log(`drain resolved ${drainedAfter} ms after that`);
      expect(lifecycle.inFlight).toBe(0);
    } finally {
      client.stop();
      client.socket.destroy();
      await app.close();
    }
  }, 10_000);

  it("answers and closes a connection that sends nothing once the headers timeout passes", async () => {
    const { app, port } = await listening({ requestTimeoutMs: 400, headersTimeoutMs: 200 });
    const silent = rawSocket(port);
    try {
      await silent.connected;
      const closedAfter = await timed(silent.closed, 3000);
      expect(parseAnswer(silent.received()).body.error.code).toBe("request_timeout");
      console.log(`silent connection closed after ${closedAfter} ms (headers timeout 200 ms)`);
    } finally {
      silent.socket.destroy();
      await app.close();
    }
  }, 10_000);

  it("never times out a request sent whole while the event loop was held up by other work", async () => {
    const fake = fakeModel();
    // A request whose rendering holds the event loop for 1.5 s, as hundreds arriving at once do.
    const render = fake.model.chatPrompt.bind(fake.model);
    fake.model.chatPrompt = (messages, tools) => {
      if (messages[0]?.content === "stall") for (const until = Date.now() + 1500; Date.now() < until; );
      return render(messages, tools);
    };
    const { app, port, url } = await listening({ fake, requestTimeoutMs: 800, headersTimeoutMs: 400 });
    const clients = Array.from({ length: 6 }, () => rawSocket(port));
    try {
      await Promise.all(clients.map((c) => c.connected));
      const stalling = fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify(chat({ messages: [{ role: "user", content: "stall" }] })),
      });
      await sleep(150);
      // Sent whole, well within both timeouts of connecting, while the server is held up.
      const body = JSON.stringify(chat());
      for (const c of clients) {
        c.socket.write(
          `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nauthorization: ${AUTH.authorization}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
      }
      expect((await stalling).status).toBe(200);
      await Promise.all(clients.map((c) => timed(c.closed, 5000)));
      for (const c of clients) expect(parseAnswer(c.received()).status, c.received().slice(0, 300)).toBe(200);
      // The timeouts still hold a client that sends nothing.
      const silent = rawSocket(port);
      await silent.connected;
      await timed(silent.closed, 3000);
      expect(parseAnswer(silent.received()).body.error.code).toBe("request_timeout");
    } finally {
      for (const c of clients) c.socket.destroy();
      await app.close();
    }
  }, 15_000);

  it("does not cut a streamed answer that runs longer than the request timeout", async () => {
    const fake = fakeModel({ script: Array(100).fill(256), tokenDelayMs: 5, contextLength: 4096 });
    const { app, url } = await listening({ fake, requestTimeoutMs: 100, headersTimeoutMs: 100 });
    try {
      const t0 = Date.now();
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify(chat({ stream: true, max_tokens: 100 })),
      });
      const events = sseEvents(await res.text()) as any[];
      const tookMs = Date.now() - t0;
      expect(events.at(-1)).toBe("[DONE]");
      expect(
        events
          .slice(0, -1)
          .map((e) => e.choices[0].delta.content ?? "")
          .join(""),
      ).toBe("Hello".repeat(100));
      expect(tookMs).toBeGreaterThan(300);
      console.log(`a ${tookMs} ms stream completed under a 100 ms request timeout`);
    } finally {
      await app.close();
    }
  }, 10_000);
});

describe("requests node's parser rejects", () => {
  it("are answered in the API's error shape: malformed HTTP 400, headers too large 413", async () => {
    const { app, port } = await listening();
    try {
      const cases: Array<[string, number, string | null]> = [
        ["NOT HTTP AT ALL\r\n\r\n", 400, null],
        [`GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ${"a".repeat(20_000)}\r\n\r\n`, 413, "request_too_large"],
      ];
      for (const [bytes, status, code] of cases) {
        const client = rawSocket(port);
        client.socket.write(bytes);
        await timed(client.closed, 3000);
        const answer = parseAnswer(client.received());
        expect(answer.status).toBe(status);
        expect(answer.headers["x-request-id"]).toMatch(/^req_/);
        expect(answer.body.error).toMatchObject({ type: "invalid_request_error", param: null, code });
      }
    } finally {
      await app.close();
    }
  }, 10_000);
});

describe("drain deadline", () => {
  it("ends a stream that outlives the deadline with an error event, and resolves by the deadline", async () => {
    const { app, fake, lifecycle, url } = await listening({ fake: longModel() });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify(chat({ stream: true, max_tokens: 2000 })),
    });
    expect(res.status).toBe(200);
    const body = res.text();
    await vi.waitFor(() => expect(fake.backend.computed).toBeGreaterThan(5));
    const drainedAfter = await timed(drainApp(app, lifecycle, { timeoutMs: 300 }), 2000);
    const events = sseEvents(await body) as any[];
    expect(events.at(-1)).toEqual({
      error: { message: expect.stringContaining("shutting down"), type: "server_error", param: null, code: "overloaded" },
    });
    expect(events).not.toContain("[DONE]");
    expect(events.length).toBeGreaterThan(3);
    expect(drainedAfter).toBeGreaterThanOrEqual(300);
    expect(drainedAfter).toBeLessThan(300 + 500);
    const computed = fake.backend.computed;
    await sleep(50);
    expect(fake.backend.computed).toBe(computed);
    expect(computed).toBeLessThan(2000);
    console.log(`drain with a 300 ms deadline resolved after ${drainedAfter} ms; the stream got ${events.length - 1} chunks, then the error event`);
  }, 10_000);

  it("answers a non-streamed request still generating at the deadline with 503", async () => {
    const { app, fake, lifecycle, url } = await listening({ fake: longModel() });
    const answer = fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify(chat({ max_tokens: 2000 })),
    });
    await vi.waitFor(() => expect(fake.backend.computed).toBeGreaterThan(5));
    const drainedAfter = await timed(drainApp(app, lifecycle, { timeoutMs: 200 }), 2000);
    const res = await answer;
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    expect(((await res.json()) as any).error).toMatchObject({ type: "server_error", code: "overloaded", param: null });
    expect(drainedAfter).toBeLessThan(200 + 500);
  }, 10_000);

  it("closes what cannot be answered at the deadline: a body still arriving, a stream its client does not read", async () => {
    // 32 KiB tokens fill the socket buffers of a client that never reads, so its stream waits on it.
    const bigToken = "x".repeat(32 * 1024);
    const fake = fakeModel({ vocab: [...VOCAB, bigToken], script: Array(2000).fill(VOCAB.length), tokenDelayMs: 1, contextLength: 4096 });
    const { app, lifecycle, port } = await listening({ fake, requestTimeoutMs: 0 });
    const trickler = trickle(port, 40);
    const stalled = rawSocket(port);
    const body = JSON.stringify(chat({ stream: true, max_tokens: 2000 }));
    stalled.socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nauthorization: ${AUTH.authorization}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    stalled.socket.pause();
    try {
      await vi.waitFor(() => expect(lifecycle.inFlight).toBe(2));
      await sleep(200);
      const drainedAfter = await timed(drainApp(app, lifecycle, { timeoutMs: 200 }), 2000);
      expect(drainedAfter).toBeLessThan(200 + 500 + 200);
      // A paused socket sees its end only once it reads again.
      stalled.socket.resume();
      await timed(Promise.all([trickler.closed, stalled.closed]), 1000);
      expect(trickler.received()).toBe("");
      await vi.waitFor(() => expect(lifecycle.inFlight).toBe(0));
      console.log(`drain with a trickler and a stalled reader resolved after ${drainedAfter} ms (deadline 200 ms)`);
    } finally {
      trickler.stop();
      trickler.socket.destroy();
      stalled.socket.destroy();
      await app.close();
    }
  }, 10_000);

  it("lets many generations watch for the cut-off without Node warning of a listener leak", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      const { app } = await fakeApp({ fake: fakeModel({ maxWaiting: 64 }) });
      const answers = await Promise.all(
        Array.from({ length: 24 }, () => app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH })),
      );
      expect(answers.map((a) => a.statusCode)).toEqual(Array(24).fill(200));
      await sleep(10);
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      process.off("warning", onWarning);
    }
  });
});

describe("connection cap", () => {
  it("closes connections beyond maxConnections as they are accepted, and takes new ones once there is room", async () => {
    const { app, port } = await listening({ maxConnections: 2 });
    const health = "GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    const open = [rawSocket(port), rawSocket(port)];
    try {
      for (const c of open) {
        await c.connected;
        c.socket.write(health);
      }
      await vi.waitFor(() => open.forEach((c) => expect(c.received()).toMatch(/^HTTP\/1\.1 200 /)));
      const third = rawSocket(port);
      third.socket.write(health);
      await timed(third.closed, 2000);
      expect(third.received()).toBe("");
      open[0].socket.destroy();
      await open[0].closed;
      await vi.waitFor(async () => expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200));
    } finally {
      for (const c of open) c.socket.destroy();
      await app.close();
    }
  }, 10_000);
});

describe("kiln serve --drain-timeout", () => {
  it("is an option in seconds, 30 by default, and checked", async () => {
    const help = capture();
    expect(await serve.run(["--help"], help.io)).toBe(0);
    expect(help.out.stdout.replace(/\s+/g, " ")).toContain(
      "--drain-timeout <seconds> how long SIGTERM or Ctrl-C waits for running requests; then each ends with an error and the process exits [0 to 86400; default: 30]",
    );
    const bad = capture();
    expect(await serve.run(["--model", SLUG, "--drain-timeout", "-1"], bad.io)).toBe(2);
    expect(bad.out.stderr).toMatch(/^kiln serve: --drain-timeout needs a number from 0 to 86400 \(got "-1"\)/);
  });
});
