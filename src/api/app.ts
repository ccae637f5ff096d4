/**
 * The HTTP app: fastify with kiln's body parsing, request ids, auth, error answers, metrics and
 * routes. It serves whatever the {@link ModelRegistry} holds and never loads a model itself, so
 * tests build it around fake models.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { openDatabase } from "../catalogue/db.js";
import { SqliteBatchStore, type BatchStore } from "../catalogue/stored-batches.js";
import { SqliteFileStore, type FileStore } from "../catalogue/stored-files.js";
import { SqliteResponseStore, type ResponseStore } from "../catalogue/stored-responses.js";
import type { ModelRegistry } from "../scheduler/index.js";
import { authHook, InternalKeys, type AuthMode } from "./auth/auth.js";
import { BatchRunner, DEFAULT_BATCH_CONCURRENCY, DEFAULT_BATCH_LEASE_MS, type SendLine } from "./batches/batch-runner.js";
import { sendThroughApp } from "./batches/send-through-app.js";
import { CloudGate } from "./cloud-gate.js";
import { consoleRoutes, type TrackRecords, type UsageReport } from "./console.js";
import type { Metering, UsageRecorder } from "./cloud-port.js";
import { Lifecycle, type ApiContext } from "./context.js";
import { assertPlainBody } from "./content-encoding.js";
import { allowCrossOrigin, type AllowedOrigins } from "./cors.js";
import { apiError, toApiError } from "./errors.js";
import { KilnMetrics } from "./metrics/kiln-metrics.js";
import { CPU_DEVICE, type ServerDevice } from "./device.js";
import { requestIdFrom } from "./request-id.js";
import { capConnections, clientErrorHandler, serverTimeoutOptions, timeoutsPastStalls, type CurrentExchanges, type ServerLimits } from "./server-limits.js";
import { chatCompletionsRoute } from "./routes/chat-completions.js";
import { releaseModelHolds } from "./routes/model-lookup.js";
import { CLIENT_CLOSED_STATUS } from "./routes/request-life.js";
import { completionsRoute } from "./routes/completions.js";
import { batchesRoutes } from "./routes/batches.js";
import { embeddingsRoute } from "./routes/embeddings.js";
import { filesRoutes } from "./routes/files.js";
import { healthRoutes } from "./routes/health.js";
import { llamaNativeRoutes } from "./routes/llama-native.js";
import { messagesRoutes } from "./routes/messages.js";
import { modelsRoute } from "./routes/models.js";
import { ollamaRoutes } from "./routes/ollama.js";
import { responsesRoutes } from "./routes/responses.js";
import { tokenizeRoutes } from "./routes/tokenize.js";
import { transcriptionsRoute } from "./routes/transcriptions.js";
import type { SseOptions } from "./sse.js";
import { DEFAULT_BATCH_PRICE, DEFAULT_DRAIN_TIMEOUT_MS } from "./defaults.js";

/** Default most bytes of a request body: 4 MiB (a full 128k-token prompt is about 0.5 MB). */
export const DEFAULT_BODY_LIMIT = 4 * 1024 * 1024;

export { DEFAULT_DRAIN_TIMEOUT_MS };

/** What the app serves with; {@link ServerLimits} bound the clients (timeouts, connections). */
export interface AppOptions extends ServerLimits {
  /** The models to serve (and their loading state). */
  models: ModelRegistry;
  /** Key checking: local (no key checked, the default) or cloud (keys from the database, through `api/cloud-port.ts`). */
  auth?: AuthMode;
  /** Serve HTTPS with this private key and certificate chain (PEM); default plain HTTP. */
  tls?: { key: Buffer; cert: Buffer };
  /** A pino logger; default: no logging. */
  logger?: FastifyBaseLogger;
  /** Most bytes of a request body; larger ones get 413. Default {@link DEFAULT_BODY_LIMIT}. */
  bodyLimit?: number;
  /** Metrics registry; default a fresh one reading the registry's queues. */
  metrics?: KilnMetrics;
  /** Where to record usage; default none (`cloud` when given). */
  usage?: UsageRecorder;
  /** Cloud mode's per-key limits, reservations and ledger (`src/cloud`'s meter); default none (no limits). */
  cloud?: Metering;
  /** Shared with the process so that SIGTERM can start draining; default a fresh one. */
  lifecycle?: Lifecycle;
  sse?: SseOptions;
  /** Warnings about how the server is exposed (e.g. beyond loopback without key checks), listed by /health; default none. */
  warnings?: readonly string[];
  /** Origins whose browser pages may call the API (CORS): `*` or exact origins; default none (no CORS headers, a preflight is a 404). */
  allowedOrigins?: AllowedOrigins;
  /** Where the Responses API keeps stored responses; default a store in a database in memory, with the default retention, gone with the app. */
  responses?: ResponseStore;
  /** The track records the console's track pages show (`kiln serve` reads them as `kiln tracks` does); default none. */
  tracks?: TrackRecords;
  /** Cloud mode's ledger, for the console's usage page; default none. */
  usageReport?: UsageReport;
  /** The device the models run on, named by /health and /metrics; default the CPU. */
  device?: ServerDevice;
  /** Where the Files API keeps files; default a store in a database in memory, gone with the app. */
  files?: FileStore;
  /** Where the Batch API keeps batches (unfinished ones resume when the app is ready); default a store in a database in memory. */
  batches?: BatchStore;
  /** Most requests of all batches answered at once. Default {@link DEFAULT_BATCH_CONCURRENCY}. */
  batchConcurrency?: number;
  /** Cloud mode: what a batch's request pays, as a fraction of the model's prices (0 to 1). Default {@link DEFAULT_BATCH_PRICE}. */
  batchPrice?: number;
  /** Milliseconds this server's hold on a batch it runs lasts unrenewed (another server sharing `batches` takes it over after). Default {@link DEFAULT_BATCH_LEASE_MS}. */
  batchLeaseMs?: number;
}

/** Methods whose requests are answered from their body: an empty one is the client's mistake. */
const BODY_METHODS: ReadonlySet<string> = new Set(["POST", "PUT", "PATCH"]);

/** Routes that keep answering while the server drains. */
const ALWAYS_OPEN = new Set(["/health", "/metrics"]);

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const models = options.models;
  const lifecycle = options.lifecycle ?? new Lifecycle();
  const internalKeys = new InternalKeys();
  // Batches send their requests through this app's own routes, once it exists.
  let sendLine: SendLine = () => Promise.reject(new Error("the app is not built yet"));
  const inMemory = !options.files || !options.batches ? openDatabase({ path: ":memory:", seed: false }) : undefined;
  const files = options.files ?? new SqliteFileStore(inMemory!);
  const ctx: ApiContext = {
    models,
    metrics: options.metrics ?? new KilnMetrics(() => queueLoads(models)),
    lifecycle,
    usage: options.usage ?? options.cloud,
    cloud: options.cloud && new CloudGate(options.cloud, options.batchPrice),
    startedAt: Math.floor(Date.now() / 1000),
    sse: options.sse ?? {},
    warnings: options.warnings ?? [],
    device: options.device ?? CPU_DEVICE,
    responses: options.responses ?? new SqliteResponseStore(openDatabase({ path: ":memory:", seed: false })),
    files,
    batches: new BatchRunner(options.batches ?? new SqliteBatchStore(inMemory!), files, (endpoint, body, key) => sendLine(endpoint, body, key), {
      concurrency: options.batchConcurrency,
      leaseMs: options.batchLeaseMs,
      halted: () => lifecycle.draining,
      onError: (batchId, err) => app.log.error({ err, batch: batchId }, "batch: could not run"),
      onAnswered: (endpoint, failed) => ctx.metrics.batchRequest(endpoint, failed),
    }),
  };
  const exchanges: CurrentExchanges = new WeakMap();
  const app = Fastify({
    ...(options.tls ? { https: options.tls } : {}),
    ...(options.logger ? { loggerInstance: options.logger } : { logger: false }),
    ...serverTimeoutOptions(options),
    bodyLimit: options.bodyLimit ?? DEFAULT_BODY_LIMIT,
    genReqId: (req) => requestIdFrom(req.headers["x-request-id"]),
    logController: new LogController({ requestIdLogLabel: "request_id" }),
    return503OnClosing: false,
    clientErrorHandler: clientErrorHandler(exchanges, ctx.metrics),
    // Errors fastify answers before routing (a URL whose percent-encoding does not decode) get the
    // API's error body and a request id too, instead of fastify's own shape.
    frameworkErrors: (err, request, reply) => {
      const error = toApiError(err, request.id);
      request.log.info({ code: error.code, status: error.status }, error.message);
      void (reply as FastifyReply).code(error.status).header("x-request-id", request.id).send(error.toBody());
    },
  });
  capConnections(app, options);
  sendLine = (endpoint, body, key) => sendThroughApp(app, internalKeys, endpoint, body, key);
  app.addHook("onReady", async () => ctx.batches.resume());
  app.addHook("onClose", async () => ctx.batches.stop());
  timeoutsPastStalls(app.server);

  // Every body is read as JSON whatever its content type (curl -d sends form-urlencoded).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "string" }, (request, body, done) => {
    const text = String(body);
    if (text.trim() === "") {
      // A DELETE (or a preflight) carries no body even when a client labels it JSON: its route answers it.
      if (!BODY_METHODS.has(request.method)) return done(null, undefined);
      return done(apiError("invalid_json", "The request body is empty: send a JSON object."), undefined);
    }
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(apiError("invalid_json", `We could not parse the JSON body of your request (${(err as Error).message}).`), undefined);
    }
  });

  app.decorateRequest("apiKey", null);

  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    exchanges.set(request.raw.socket, { request, reply });
    ctx.lifecycle.requestStarted();
    // 'close' fires once the answer is complete or the client has gone: either way it is over.
    reply.raw.once("close", () => {
      ctx.lifecycle.requestFinished();
      releaseModelHolds(request);
    });
    if (ctx.lifecycle.draining && !ALWAYS_OPEN.has(request.url.split("?")[0])) {
      reply.header("connection", "close");
      throw apiError("shutting_down", "The server is shutting down; retry on another instance or in a moment.");
    }
  });
  allowCrossOrigin(app, options.allowedOrigins ?? []);
  app.addHook("onRequest", async (request) => assertPlainBody(request));

  // Each request is counted once: by onResponse when its answer went out whole, or when its client
  // left first (a cancelled stream, an abandoned wait), for which fastify runs no onResponse.
  const counted = new WeakSet<FastifyRequest>();
  const countRequest = (request: FastifyRequest, status: number) => {
    if (counted.has(request)) return;
    counted.add(request);
    ctx.metrics.request(request.routeOptions.url ?? "unmatched", request.method, status);
  };
  app.addHook("onRequest", async (request, reply) => {
    // A body that never arrived whole is the client-error handler's to count.
    reply.raw.once("close", () => {
      if (!reply.raw.writableFinished && request.raw.complete) countRequest(request, CLIENT_CLOSED_STATUS);
    });
  });

  app.addHook("onResponse", async (request, reply) => {
    countRequest(request, reply.statusCode);
    // While draining, a finished answer frees its connection instead of keeping it alive.
    // (A batch's request, sent through the app itself, has no real connection to end.)
    if (ctx.lifecycle.draining && typeof request.raw.socket?.end === "function") request.raw.socket.end();
  });

  app.setErrorHandler((err: FastifyError, request, reply) => {
    const error = toApiError(err, request.id);
    if (error.status >= 500 && error.code === "internal_error") request.log.error({ err }, "request failed");
    else request.log.info({ code: error.code, status: error.status, param: error.param }, error.message);
    if (error.retryAfter !== undefined) reply.header("retry-after", String(error.retryAfter));
    if (error.noRetry) reply.header("x-should-retry", "false");
    return reply.code(error.status).send(error.toBody());
  });

  app.setNotFoundHandler((request, reply) => {
    const error = apiError("route_not_found", unknownRouteMessage(request.method, request.url.split("?")[0]));
    return reply.code(error.status).send(error.toBody());
  });

  const auth: AuthMode = options.auth ?? { mode: "local" };
  healthRoutes(app, ctx, auth);
  consoleRoutes(app, auth, options.tracks, options.usageReport);
  await app.register(
    async (v1) => {
      v1.addHook("onRequest", authHook(auth, internalKeys));
      const cloud = ctx.cloud;
      // Every cloud answer after auth carries its key's rate-limit headers (admission sets fresh ones).
      if (cloud) v1.addHook("onSend", async (request, reply) => cloud.addLastKnownHeaders(request, reply));
      modelsRoute(v1, ctx);
      chatCompletionsRoute(v1, ctx);
      completionsRoute(v1, ctx);
      embeddingsRoute(v1, ctx);
      responsesRoutes(v1, ctx);
      tokenizeRoutes(v1, ctx);
      batchesRoutes(v1, ctx);
      await messagesRoutes(v1, ctx);
      await v1.register(async (uploads) => filesRoutes(uploads, ctx));
      await v1.register(async (audio) => transcriptionsRoute(audio, ctx));
    },
    { prefix: "/v1" },
  );
  // Where vLLM's and llama.cpp's servers answer them, outside /v1, as well.
  await app.register(async (root) => {
    root.addHook("onRequest", authHook(auth));
    tokenizeRoutes(root, ctx);
  });
  await ollamaRoutes(app, ctx, auth);
  await llamaNativeRoutes(app, ctx, auth);
  return app;
}

/** A path under /v1 names a route that does not exist; elsewhere the client may have left out the prefix. */
function unknownRouteMessage(method: string, path: string): string {
  if (method === "OPTIONS")
    return `Unknown request URL: OPTIONS ${path}. This server answers no CORS preflight from this origin: its operator allows origins with \`kiln serve --allowed-origins\`.`;
  const hint = path === "/v1" || path.startsWith("/v1/") ? "This route does not exist." : "The API's routes are under /v1.";
  return `Unknown request URL: ${method} ${path}. ${hint}`;
}

function queueLoads(models: ModelRegistry) {
  return models.servingText().map((m) => ({ model: m.slug, ...m.engine.load }));
}

export interface DrainOptions {
  /**
   * Milliseconds the running requests get to finish. Past it, each still-running generation ends
   * with an error (an error event on a stream, a 503 otherwise), and every connection left is
   * closed. Default {@link DEFAULT_DRAIN_TIMEOUT_MS}; Infinity waits for as long as they run.
   */
  timeoutMs?: number;
}

/** Milliseconds the answers of cut-off requests get to reach their clients before their connections are closed. */
const CUT_OFF_GRACE_MS = 500;

/**
 * Graceful stop: while requests are in flight the server keeps listening and answers new ones with
 * 503 (so clients and load balancers see a clear "go elsewhere"); once the last one has finished,
 * or the deadline has cut off the rest, the server closes. Resolves once every connection is gone.
 */
export async function drainApp(app: FastifyInstance, lifecycle: Lifecycle, options: DrainOptions = {}): Promise<void> {
  lifecycle.startDraining();
  if (!(await settlesWithin(lifecycle.idle(), options.timeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS))) {
    lifecycle.cutOff();
    await settlesWithin(lifecycle.idle(), CUT_OFF_GRACE_MS);
    // What is left cannot be answered: a client not reading its stream, a body still arriving.
    app.server.closeAllConnections();
  }
  await app.close();
}

/** Whether `promise` settles within `ms` milliseconds. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  if (ms === Infinity) return promise.then(() => true);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true as const), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
