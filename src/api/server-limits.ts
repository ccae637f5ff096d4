/**
 * Bounds on what a client can hold: how long it may take to send a request, how long a connection
 * may sit idle, how many connections may be open. Node's HTTP server enforces the timeouts; a
 * request that misses one is answered here, in the API's error shape, before any route sees it.
 */
import { STATUS_CODES, type Server } from "node:http";
import type { Socket } from "node:net";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { apiError, type ApiError } from "./errors.js";
import type { KilnMetrics } from "./metrics/kiln-metrics.js";
import { requestIdFrom } from "./request-id.js";

/** Default milliseconds a client has to send a whole request, body included: 30 s. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/** Default milliseconds a client has to send a request's headers: 10 s. */
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
/** Default milliseconds a kept-alive connection may sit idle between requests: 72 s, past common load balancers' 60 s so that they close first. */
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 72_000;
/** Default most connections open at once: 1024. */
export const DEFAULT_MAX_CONNECTIONS = 1024;

export interface ServerLimits {
  /**
   * Milliseconds a client has to send its whole request, headers and body, from its first byte
   * (from connecting, for a connection's first request); past it the request gets 400
   * `request_timeout` and its connection closes. Only receiving is timed: an answer (a stream
   * included) runs for as long as it generates. Enforced to within about a second.
   * Default {@link DEFAULT_REQUEST_TIMEOUT_MS}; 0 = no limit.
   */
  requestTimeoutMs?: number;
  /**
   * Milliseconds a client has to send a request's headers, from its first byte (or from connecting,
   * for a connection's first request); past it, the same 400 `request_timeout`. Capped at
   * `requestTimeoutMs`. Default {@link DEFAULT_HEADERS_TIMEOUT_MS}.
   */
  headersTimeoutMs?: number;
  /** Milliseconds a kept-alive connection may sit idle between requests before it is closed. Default {@link DEFAULT_KEEP_ALIVE_TIMEOUT_MS}. */
  keepAliveTimeoutMs?: number;
  /** Most connections open at once; a connection beyond it is closed as soon as it is accepted (and logged). Default {@link DEFAULT_MAX_CONNECTIONS}. */
  maxConnections?: number;
}

/** Node checks its request and header deadlines on an interval; this keeps them to within about a second (or a quarter of a short timeout). */
function checkingInterval(timeoutsMs: number[]): number {
  const shortest = Math.min(...timeoutsMs.filter((t) => t > 0));
  return Number.isFinite(shortest) ? Math.max(10, Math.min(1000, Math.floor(shortest / 4))) : 1000;
}

/** The fastify options that carry the timeouts. */
export function serverTimeoutOptions(limits: ServerLimits) {
  const requestTimeout = limits.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const headersWanted = limits.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
  // Node refuses a headers timeout longer than the request timeout.
  const headersTimeout = requestTimeout > 0 ? Math.min(headersWanted, requestTimeout) : headersWanted;
  return {
    requestTimeout,
    keepAliveTimeout: limits.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_TIMEOUT_MS,
    // No socket-inactivity timeout: nothing moves on a connection while kiln computes a
    // non-streamed answer, however long that takes. Silence is bounded where it is the client's:
    // the headers and body timeouts before an answer, the keep-alive timeout after one.
    connectionTimeout: 0,
    http: { requestTimeout, headersTimeout, connectionsCheckingInterval: checkingInterval([requestTimeout, headersTimeout]) },
  };
}

/** Milliseconds between the beats that measure how long the event loop was held up. */
const STALL_BEAT_MS = 100;

/**
 * Makes the request and headers timeouts count only time in which the server could read.
 *
 * Node times a request from its connection (or its first byte) in C++, but reads the bytes only
 * when the event loop gets to them; while the loop is held up by synchronous work (256 requests
 * arriving at once, each rendered and tokenized on the main thread), a request sent whole sits
 * unread in the kernel, and Node's next check would time it out as if the client were slow. So
 * the deadlines Node reads at each check (`server.requestTimeout`, `server.headersTimeout`) are
 * lengthened by the stalls of the last timeout's span, measured as late beats of a timer: the
 * client is still held to the timeouts for the time the server was listening.
 */
export function timeoutsPastStalls(server: Server): void {
  const base = { request: server.requestTimeout, headers: server.headersTimeout };
  if (base.request <= 0 && base.headers <= 0) return;
  const stalls: Array<{ end: number; ms: number }> = [];
  let last = performance.now();
  const beat = setInterval(() => {
    const now = performance.now();
    const late = now - last - STALL_BEAT_MS;
    last = now;
    if (late > STALL_BEAT_MS / 5) stalls.push({ end: now, ms: late });
  }, STALL_BEAT_MS);
  beat.unref();
  server.once("close", () => clearInterval(beat));
  /** Milliseconds the loop was held up within the last `span` ms, the stall going on now included. */
  const stalled = (span: number): number => {
    const now = performance.now();
    while (stalls.length > 0 && now - stalls[0].end > span) stalls.shift();
    let ms = Math.max(0, now - last - STALL_BEAT_MS);
    for (const s of stalls) ms += s.ms;
    return Math.ceil(ms);
  };
  const lengthened = (key: "request" | "headers") => ({
    configurable: true,
    enumerable: true,
    get: () => (base[key] > 0 ? base[key] + stalled(Math.max(base.request, base.headers)) : 0),
    set: (ms: number) => (base[key] = ms),
  });
  Object.defineProperty(server, "requestTimeout", lengthened("request"));
  Object.defineProperty(server, "headersTimeout", lengthened("headers"));
}

/** Closes connections beyond `limits.maxConnections` as they are accepted, and logs each one. */
export function capConnections(app: FastifyInstance, limits: ServerLimits): void {
  const max = limits.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  app.server.maxConnections = max;
  app.server.on("drop", (data) => app.log.warn({ remote: data?.remoteAddress, max_connections: max }, "connection refused: too many open connections"));
}

/** The latest request on each connection and its reply: whose body a timeout cut short, and whether an answer is going out. */
export type CurrentExchanges = WeakMap<Socket, { request: FastifyRequest; reply: FastifyReply }>;

/**
 * A fastify `clientErrorHandler`: answers what node's HTTP parser gives up on (a request too slow
 * to arrive, malformed HTTP, headers too large) in the API's error shape instead of fastify's own
 * (which says 408, a status the contract forbids), then closes the connection.
 */
export function clientErrorHandler(exchanges: CurrentExchanges, metrics: KilnMetrics) {
  const answered = new WeakSet<Socket>();
  // fastify calls it with the app as `this`.
  return function (this: FastifyInstance, err: Error & { code?: string }, socket: Socket): void {
    if (err.code === "ECONNRESET" || socket.destroyed || answered.has(socket)) return;
    answered.add(socket);
    const error = clientErrorOf(err);
    const current = exchanges.get(socket);
    const request = current && !current.request.raw.complete ? current.request : undefined;
    (request?.log ?? this.log).info({ code: error.code, status: error.status }, error.message);
    if (request) metrics.request(request.routeOptions.url ?? "unmatched", request.method, error.status);
    // Bytes written into an answer already on its way (a stream) would corrupt it.
    const answering = current !== undefined && current.reply.raw.headersSent && !current.reply.raw.writableFinished;
    if (!socket.writable || answering) {
      socket.destroy();
      return;
    }
    socket.end(rawAnswer(error, request?.id ?? requestIdFrom(undefined)));
    lingerThenDestroy(socket);
  };
}

function clientErrorOf(err: Error & { code?: string }): ApiError {
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") {
    return apiError("request_timeout", "The request did not arrive in time: its headers and body must be sent within the server's request timeout.");
  }
  if (err.code === "HPE_HEADER_OVERFLOW") return apiError("request_too_large", "The request's headers are larger than this server accepts.");
  return apiError("invalid_request", "The request is not well-formed HTTP.");
}

/** A whole HTTP/1.1 answer, written on the socket itself: no route (and no reply object) has it. */
function rawAnswer(error: ApiError, requestId: string): string {
  const body = JSON.stringify(error.toBody());
  return [
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}`,
    "content-type: application/json; charset=utf-8",
    `content-length: ${Buffer.byteLength(body)}`,
    `x-request-id: ${requestId}`,
    "connection: close",
    "",
    body,
  ].join("\r\n");
}

/** Milliseconds a closing connection is kept for the client to read its answer. */
const LINGER_MS = 1000;

/**
 * Gives the client a moment to read the answer and close: destroying a socket with unread input
 * (a body still trickling in) sends a reset, which can discard the answer before the client sees it.
 */
function lingerThenDestroy(socket: Socket): void {
  socket.once("end", () => socket.destroy());
  socket.resume();
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}
