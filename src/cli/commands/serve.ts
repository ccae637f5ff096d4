/** `kiln serve --model <slug>...`: the OpenAI-compatible HTTP API over the given models. */
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import {
  buildApp,
  DEFAULT_DRAIN_TIMEOUT_MS,
  drainApp,
  exposureWarning,
  Lifecycle,
  isLoopbackHost,
  originProblem,
  type AuthMode,
  type UsageReport,
} from "../../api/index.js";
import {
  CloudMeter,
  createRedisLimits,
  DEFAULT_ORPHAN_AFTER_MS,
  isPostgresUrl,
  KeyStore,
  loadKeySecret,
  MemoryLimits,
  openCloudStore,
  SpooledUsageRecorder,
  storeUsageLedger,
  usageSpoolPath,
  type CloudStore,
} from "../../cloud/index.js";
import { databaseOption, keySecretFileOption } from "../cloud-options.js";
import { getModel, hasModel } from "../../catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../../catalogue/db.js";
import { createProgressPrinter } from "../../catalogue/pull/progress.js";
import type { Promotion } from "../../catalogue/promotions.js";
import { DEFAULT_MAX_STORED_RESPONSES, DEFAULT_STORED_RESPONSE_DAYS, ResponseStore } from "../../catalogue/stored-responses.js";
import {
  DEFAULT_BEAM_SIZE,
  DEFAULT_SPEECH_SLOTS,
  loadLocalGguf,
  type LocalGguf,
  loadModel,
  type LoadModelOptions,
  loadSpeechModel,
  type LoadSpeechModelOptions,
  OnDemandLoader,
  PromotionWatcher,
} from "../../provision/index.js";
import {
  ComputeGate,
  DEFAULT_KEEP_ALIVE_MS,
  DEFAULT_MAX_RUNNING,
  DEFAULT_MAX_WAITING,
  DEFAULT_PREFILL_CHUNK,
  hostKvMemoryBytes,
  ModelRegistry,
  type ServedModel,
} from "../../scheduler/index.js";
import { machineMemoryBytes } from "../../compiler/compilability.js";
import { defineCommand, type CommandIO } from "../command.js";
import { activationsOption, chooseDevice, describeDevice, deviceOption, serverDevice } from "../device-option.js";
import type { DeviceDecision } from "../../runtime/device/choose.js";
import { checkLocalModels, splitModelArgs } from "../local-models.js";
import { option, UsageError, type OptionValues } from "../options.js";
import { startNightly, trackHistory, trend } from "../../track/index.js";
import { promote } from "./promote.js";
import { rollBack } from "./rollback.js";

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

const options = {
  model: option.string({
    short: "m",
    value: "<slug|file.gguf>",
    multiple: true,
    description:
      "a model to load at start and keep loaded: a catalogue slug (see `kiln models`), or a GGUF file on this machine (served under a slug made from its file name); every other pulled model is loaded on its first request",
  }),
  keepAlive: option.number({
    value: "<seconds>",
    min: 0,
    max: 31_536_000,
    default: DEFAULT_KEEP_ALIVE_MS / 1000,
    description: "how long a model loaded on a request stays loaded without requests; the --model ones stay loaded",
  }),
  memoryBudget: option.integer({
    value: "MiB",
    min: 1,
    max: 1_073_741_824,
    description:
      "memory the loaded models may take together (weights and KV budgets); the least recently used models loaded on a request are unloaded to make room, and a model that can never fit is refused. Default: the machine's (or cgroup's) memory",
  }),
  pullOnDemand: option.flag({
    description: "pull a model that is not pulled yet on its first request (by default such a request gets 404 model_not_pulled, naming `kiln pull <slug>`)",
  }),
  port: option.integer({ min: 0, max: 65535, default: 8000, description: "TCP port; 0 picks a free one" }),
  host: option.string({ value: "<address>", default: "127.0.0.1", description: "address to listen on; 0.0.0.0 for every interface" }),
  cloud: option.flag({
    description:
      "check API keys (see `kiln keys`), enforce their limits and write the usage ledger (see `kiln usage`); without it (local mode) no key is checked (a request may omit the Authorization header) and nothing is charged",
  }),
  database: databaseOption,
  limits: option.string({
    value: "<memory|redis://…>",
    default: "memory",
    description: "where cloud mode keeps the limit counters: memory (this process only) or redis://… (shared by every replica of a fleet)",
  }),
  keySecretFile: keySecretFileOption,
  orphanTimeout: option.number({
    value: "<seconds>",
    min: 1,
    max: 86_400,
    default: DEFAULT_ORPHAN_AFTER_MS / 1000,
    description: "cloud mode: a replica silent this long is taken for dead, and the requests it was serving are charged from their reservations",
  }),
  threads: option.integer({ min: 1, max: 256, default: 2, description: "ONNX Runtime threads per model" }),
  device: deviceOption,
  activations: activationsOption,
  vadFilter: option.flag({
    description:
      "skip silence before decoding in every transcription and translation that does not say otherwise (form field vad_filter, or chunking_strategy): Silero VAD with faster-whisper's defaults (threshold 0.5, 2 s of silence ends speech, 400 ms kept around it). Off by default, as in faster-whisper's WhisperModel and the reference API (which cuts at silences only when chunking_strategy asks); the detector's model (2.3 MB) is pulled at start with this flag, else on the first request that asks for it",
  }),
  beamSize: option.integer({
    min: 1,
    max: 16,
    default: DEFAULT_BEAM_SIZE,
    description:
      "beams of each transcription's beam search, with faster-whisper's patience 1 and length penalty 1 (a sampled retry after a failed window keeps 5 candidates); 1 is greedy decoding, faster and a little less accurate. A running transcription holds this many decoder rows; a request's beam_size form field may ask for fewer",
  }),
  maxRunning: option.integer({
    min: 1,
    max: 256,
    default: DEFAULT_MAX_RUNNING,
    description: "sequences generating at once per model, batched into each step: the model's KV slots (each choice of a request takes one)",
  }),
  maxWaiting: option.integer({ min: 0, max: 100_000, default: DEFAULT_MAX_WAITING, description: "requests queued per model before new ones get 503" }),
  prefillChunk: option.integer({
    min: 1,
    max: 8192,
    default: DEFAULT_PREFILL_CHUNK,
    description: "prompt tokens computed per model call; long prompts go in chunks between the others' tokens",
  }),
  prefixReuse: option.choice(["exact", "any", "off"], {
    default: "exact",
    description:
      "reuse of cached prompt prefixes across requests: exact (whole prefill chunks, results identical to a fresh prefill), any (every cached position, e.g. short shared system prompts; results may differ slightly), off",
  }),
  kvMemoryMb: option.integer({
    value: "MiB",
    min: 1,
    max: 1_048_576,
    description:
      "KV cache budget per model, all slots together; caps each sequence's context to what fits. Default: sized per model at load, a quarter of the available memory but at most an eighth of the machine's (or cgroup's) total, no more than every slot's native context needs and no less than 128 positions per slot, in 128-position steps. The startup line shows the budget and the context per sequence; /v1/models reports the context",
  }),
  drainTimeout: option.number({
    value: "<seconds>",
    min: 0,
    max: 86_400,
    default: DEFAULT_DRAIN_TIMEOUT_MS / 1000,
    description: "how long SIGTERM or Ctrl-C waits for running requests; then each ends with an error and the process exits",
  }),
  allowedOrigins: option.string({
    value: "<origin|*>",
    multiple: true,
    description:
      "let browser pages from this origin (scheme://host[:port], e.g. https://app.example.com; * for any; repeatable or comma-separated) call the API: CORS preflights are answered and answers carry access-control-allow-origin. Default none: no CORS headers, and a preflight is a 404",
  }),
  logLevel: option.choice(LOG_LEVELS, { value: "<level>", env: "KILN_LOG_LEVEL", default: "info", description: "what to log; logs are JSON lines on stderr" }),
  storedResponses: option.integer({
    value: "<count>",
    min: 0,
    max: 100_000_000,
    default: DEFAULT_MAX_STORED_RESPONSES,
    description:
      "most Responses API responses kept (store: true, the default) for previous_response_id and GET /v1/responses/{id}, in $KILN_HOME/kiln.sqlite; the oldest are deleted first; 0 keeps none",
  }),
  storedResponseDays: option.number({
    value: "<days>",
    min: 0,
    max: 36_500,
    default: DEFAULT_STORED_RESPONSE_DAYS,
    description: "days a stored Responses API response is kept; older ones are neither found nor continued, and are deleted",
  }),
  noNightly: option.flag({
    description:
      "do not run the optimization tracks (compiler-jobs/<slug>.json) of the text models served since the start (named or loaded on demand) on their schedules; by default each runs as its own lower-priority process",
  }),
};

/** Milliseconds past the drain deadline that closing the models and the database may take before the process exits anyway. */
const STOP_GRACE_MS = 10_000;

/**
 * Exits the process if it is still running `ms` from now: the drain deadline is a promise to
 * whoever sent SIGTERM, kept even if closing something hangs. The timer alone keeps nothing alive.
 */
function exitIfStuck(ms: number, io: CommandIO): void {
  setTimeout(() => {
    io.stderr.write(`kiln serve: still stopping ${ms / 1000} s after the signal; exiting now\n`);
    process.exit(1);
  }, ms).unref();
}

/**
 * Cloud mode's stores: the database (keys, ledger, reservations, heartbeats), the limit counters,
 * and the meter over them, beating. The usage spool is per host and port, so replicas sharing a
 * KILN_HOME never share one, and a replica restarted in place settles what it left.
 */
async function startCloud(o: ServeArgs, logger: pino.Logger): Promise<{ store: CloudStore; meter: CloudMeter }> {
  if (o.limits !== "memory" && !/^rediss?:\/\//.test(o.limits)) throw new UsageError(`--limits must be memory or redis://…, not ${o.limits}`);
  loadKeySecret({ file: o.keySecretFile }); // fails now, not on the first request
  const store = await openCloudStore(o.database);
  try {
    const priceOf = (slug: string) => (hasModel(slug) ? getModel(slug) : undefined);
    const limits = o.limits === "memory" ? await memoryLimits(store) : await createRedisLimits(o.limits);
    const spoolPath = isPostgresUrl(o.database) ? join(dirname(usageSpoolPath()), `usage-spool-${hostname()}-${o.port}.jsonl`) : usageSpoolPath();
    const recorder = new SpooledUsageRecorder({ ledger: storeUsageLedger(store, priceOf), spoolPath, log: logger });
    const orphanAfterMs = o.orphanTimeout * 1000;
    const meter = new CloudMeter({ store, limits, recorder, priceOf, orphanAfterMs, heartbeatMs: Math.min(5_000, orphanAfterMs / 3), log: logger });
    await meter.start();
    return { store, meter };
  } catch (err) {
    await store.close();
    throw err;
  }
}

/** Limit counters in this process, seeded with today's spend so that a restart keeps each key's daily budget. */
async function memoryLimits(store: CloudStore): Promise<MemoryLimits> {
  const dayStart = new Date();
  dayStart.setUTCHours(0, 0, 0, 0);
  const spent = await store.spendSince(dayStart);
  const seededDay = dayStart.getTime();
  // The seed is the ledger of the day it was read; a later day starts from what this process counts itself.
  return new MemoryLimits({ spentToday: (keyId) => (Date.now() - seededDay < 86_400_000 ? Number(spent.get(keyId) ?? 0n) : 0) });
}

export default defineCommand({
  name: "serve",
  description: "Serve models over the OpenAI-compatible HTTP API",
  intro: `Starts the HTTP API at http://<host>:<port>/v1 (chat/completions, completions, responses,
audio/transcriptions, models), then pulls, compiles and loads each model (progress on stderr).
GET /health answers 503 until the models are loaded, then 200. SIGTERM or Ctrl-C stops taking
requests and exits once the running ones have finished, or after --drain-timeout, ending the ones
left with an error (a second Ctrl-C exits at once). A --host beyond loopback without --cloud lets
anyone on the network in: kiln warns about it on stderr and in GET /health. A text model serves its
promoted artifact when it has one, with the promotion's settings where no flag is given here (a
given flag wins); a promotion or rollback while serving switches it live within seconds, failing no
request. Text and transcription models can be served side by side (-m smollm2-135m-instruct
-m whisper-tiny-en); a speech model takes --threads, --max-waiting and --beam-size, and decodes 4
transcriptions at once. Every other pulled model of the catalogue is loaded on its first request (which waits up
to 60 s for it, then gets 503 model_loading with retry-after), unloaded after --keep-alive without
requests, and the least recently used ones are unloaded to make room under --memory-budget; the
--model ones stay loaded. A model never pulled is a 404 model_not_pulled, unless --pull-on-demand.`,
  options,
  run: async (commandLine, io) => {
    const models = splitModelArgs(commandLine.options.model ?? []);
    return serve(
      {
        ...commandLine.options,
        slugs: models.slugs,
        locals: await checkLocalModels(models.files),
        origins: allowedOrigins(commandLine.options.allowedOrigins),
        given: commandLine.given,
      },
      io,
    );
  },
});

type ServeArgs = OptionValues<typeof options> & {
  slugs: string[];
  /** The GGUF files on this machine to serve, checked. */
  locals: LocalGguf[];
  origins: string[];
  given: ReadonlySet<keyof typeof options>;
  /** What --device resolved to on this machine: the device every model loads on, and its adapter. */
  resolvedDevice: DeviceDecision;
};

/** `--allowed-origins`, each given and each comma-separated one, checked as origins; a usage error names the first that is not. */
function allowedOrigins(given: string[]): string[] {
  const origins = given
    .flatMap((g) => g.split(","))
    .map((o) => o.trim())
    .filter((o) => o !== "");
  for (const origin of origins) {
    const problem = originProblem(origin);
    if (problem !== undefined) throw new UsageError(`--allowed-origins: ${problem}`);
  }
  return [...new Set(origins)];
}

/**
 * How text models load, at start and at a live switch: a flag the operator gave wins over the
 * settings of a promoted artifact, which win over the flag's default (so only given flags are passed).
 */
function textLoadOptions(o: ServeArgs, gate: ComputeGate | undefined): LoadModelOptions {
  const given = <K extends keyof typeof options>(key: K) => (o.given.has(key) ? o[key] : undefined);
  return {
    threads: given("threads"),
    maxRunning: given("maxRunning"),
    prefillChunk: given("prefillChunk"),
    prefixReuse: given("prefixReuse"),
    session: { device: o.resolvedDevice.device },
    deviceActivations: o.activations,
    adapterMemory: o.resolvedDevice.adapter?.memory,
    maxWaiting: o.maxWaiting,
    kvMemoryBytes: o.kvMemoryMb === undefined ? undefined : o.kvMemoryMb * 1024 * 1024,
    gate,
  };
}

/** How speech models load, at start and on demand. */
function speechLoadOptions(o: ServeArgs, gate: ComputeGate): LoadSpeechModelOptions {
  return {
    device: o.resolvedDevice.device,
    deviceActivations: o.activations,
    adapterMemory: o.resolvedDevice.adapter?.memory,
    threads: o.threads,
    maxWaiting: o.maxWaiting,
    gate,
    vadFilter: o.vadFilter,
    beamSize: o.beamSize,
  };
}

/** The startup line's account of a promotion. */
function promotionNote(model: ServedModel, tried: Promotion | null): string {
  if (model.promotion) return `promoted ${model.promotion.createdAt}${model.promotion.reason ? `: ${model.promotion.reason}` : ""}`;
  return tried ? `NOT the promoted ${tried.artifactId}, which cannot be served` : "default compile";
}

async function serve(o: Omit<ServeArgs, "resolvedDevice">, io: CommandIO): Promise<number> {
  const resolvedDevice = await chooseDevice("serve", o.device, io);
  return new ServeSession({ ...o, resolvedDevice }, io).run();
}

/**
 * One `kiln serve`, phase by phase: {@link openCloud} (cloud mode's stores and meter) and
 * {@link openPromotions}, {@link createApp} and {@link listen} (the API answers while models load),
 * {@link loadModels}, {@link startFollowing} (promotions, the nightly track), then {@link stop}
 * (drain, close) on the first signal. Its exit code is what {@link run} returns.
 */
class ServeSession {
  private readonly logger: pino.Logger;
  private readonly registry: ModelRegistry;
  /** One model call at a time across the models served here (text first), so they do not slow each other down. */
  private readonly gate = new ComputeGate();
  private readonly lifecycle = new Lifecycle();
  private auth: AuthMode = { mode: "local" };
  private cloud: { store: CloudStore; meter: CloudMeter } | null = null;
  /** Promotions choose each text model's artifact at start, and are followed while serving (the live switch); null when the database cannot be opened. */
  private promotionsDb: KilnDatabase | null = null;
  private watcher: PromotionWatcher | null = null;
  /** Stops the optimization track's scheduler, started once the models serve. */
  private stopNightly: (() => Promise<void>) | null = null;
  private app: FastifyInstance | null = null;
  private url = "";
  /** Aborted by the first signal: the models still loading stop. */
  private readonly loading = new AbortController();
  private stopping: Promise<void> | null = null;
  private readonly stopped: Promise<void>;
  private resolveStopped!: () => void;

  constructor(
    private readonly o: ServeArgs,
    private readonly io: CommandIO,
  ) {
    this.logger = pino({ level: o.logLevel, base: { pid: process.pid } }, pino.destination(2));
    this.registry = this.createRegistry();
    for (const slug of [...o.slugs, ...o.locals.map((l) => l.slug)]) this.registry.expect(slug);
    this.stopped = new Promise<void>((resolve) => (this.resolveStopped = resolve));
  }

  async run(): Promise<number> {
    if (!(await this.openCloud())) return 1;
    this.openPromotions();
    await this.createApp();
    if (!(await this.listen())) return 1;
    process.on("SIGTERM", this.onSignal);
    process.on("SIGINT", this.onSignal);
    try {
      await this.loadModels();
      if (!this.loading.signal.aborted) {
        if (this.o.slugs.length + this.o.locals.length > 0 && !this.registry.all().some((s) => s.status === "serving")) {
          await this.stop("no model could be loaded");
          return 1;
        }
        this.startFollowing();
        this.io.stderr.write(`kiln serve: ready at ${this.url}\n`);
      }
      await this.stopped;
      this.io.stderr.write("kiln serve: stopped\n");
      return 0;
    } finally {
      process.off("SIGTERM", this.onSignal);
      process.off("SIGINT", this.onSignal);
    }
  }

  /**
   * The registry over the --model models and, on demand, every other pulled one: loaded through
   * provisioning, unloaded after --keep-alive, the least recently used making room under --memory-budget.
   */
  private createRegistry(): ModelRegistry {
    const o = this.o;
    const budgetBytes = o.memoryBudget === undefined ? undefined : o.memoryBudget * 2 ** 20;
    let registry: ModelRegistry | undefined;
    const loader = new OnDemandLoader({
      pullOnDemand: o.pullOnDemand,
      text: { ...textLoadOptions(o, this.gate), onWarning: (message) => this.tell("warn")({}, message) },
      speech: speechLoadOptions(o, this.gate),
      memoryBudgetBytes: budgetBytes,
      reservedKvBytes: () => (registry?.servingText() ?? []).reduce((n, m) => n + hostKvMemoryBytes(m), 0),
      onStage: (slug, stage) => this.logger.info({ model: slug }, `${slug}: ${stage} (on demand)`),
    });
    registry = new ModelRegistry({ loader, keepAliveMs: o.keepAlive * 1000, memoryBudgetBytes: budgetBytes ?? machineMemoryBytes() });
    return registry;
  }

  /** Cloud mode's stores and meter, and the key check over them; false (said on stderr) when they cannot start. */
  private async openCloud(): Promise<boolean> {
    if (!this.o.cloud) return true;
    try {
      this.cloud = await startCloud(this.o, this.logger);
    } catch (err) {
      this.io.stderr.write(`kiln serve: cannot start cloud mode: ${(err as Error).message}\n`);
      return false;
    }
    this.auth = { mode: "cloud", keys: new KeyStore(this.cloud.store, loadKeySecret({ file: this.o.keySecretFile })) };
    return true;
  }

  private openPromotions(): void {
    try {
      // A read-only KILN_HOME (a fleet's shared one) is read as it is: its promotions serve.
      this.promotionsDb = openDatabase({ readOnlyFallback: true });
    } catch (err) {
      const message = `cannot open the database to read promotions (${(err as Error).message}): the default compiles serve, and promotions are not followed`;
      this.io.stderr.write(`kiln serve: WARNING: ${message}\n`);
      this.logger.warn({ err }, message);
    }
  }

  /** The HTTP app over the registry (empty yet); a host beyond loopback without key checks is warned about here and in /health. */
  private async createApp(): Promise<void> {
    const o = this.o;
    const warning = exposureWarning(o.host, o.cloud);
    if (warning) {
      this.io.stderr.write(`\nkiln serve: WARNING: ${warning}\n\n`);
      this.logger.warn({ host: o.host }, warning);
    }
    this.app = await buildApp({
      models: this.registry,
      auth: this.auth,
      logger: this.logger,
      cloud: this.cloud?.meter,
      lifecycle: this.lifecycle,
      warnings: warning ? [warning] : [],
      device: serverDevice(o.resolvedDevice),
      // In the records database beside the promotions; in memory, for this process only, when it cannot be opened or only read.
      responses: new ResponseStore(this.promotionsDb && !this.promotionsDb.readonly ? this.promotionsDb : openDatabase({ path: ":memory:", seed: false }), {
        maxCount: o.storedResponses,
        maxAgeSeconds: o.storedResponseDays * 86_400,
      }),
      allowedOrigins: this.o.origins,
      // The console's track pages, read as `kiln tracks --json` reads them; empty without the records database.
      tracks: {
        history: (slug) => {
          const db = this.promotionsDb;
          return db ? { ...trackHistory(db, slug), trend: trend(db, slug) } : { slug, current: null, candidates: [], trend: [] };
        },
        // As `kiln promote` and `kiln rollback` do, in a database opened for writing; the promotion watcher switches live.
        ...(offersOperatorActions(o.host, o.cloud)
          ? {
              promote: (slug: string, artifact: string) => withDatabase((db) => promote(db, slug, artifact, "operator (console)")),
              rollback: (slug: string) => withDatabase((db) => rollBack(db, slug)),
            }
          : {}),
      },
      usageReport: this.cloud ? usageReport(this.cloud.store) : undefined,
    });
  }

  /** Listens on --host and --port; false (said on stderr, the stores closed) when it cannot. */
  private async listen(): Promise<boolean> {
    const { o, io, cloud } = this;
    const app = this.app!;
    try {
      await app.listen({ port: o.port, host: o.host });
    } catch (err) {
      io.stderr.write(`kiln serve: cannot listen on ${o.host}:${o.port}: ${(err as Error).message}\n`);
      await this.closeCloud();
      this.promotionsDb?.close();
      return false;
    }
    const address = app.server.address();
    const port = typeof address === "object" && address ? address.port : o.port;
    this.url = `http://${o.host.includes(":") ? `[${o.host}]` : o.host}:${port}/v1`;
    io.stderr.write(
      `kiln serve: listening on ${this.url} (${cloud ? `cloud mode: API keys checked, ${cloud.store.kind} database, ${o.limits === "memory" ? "limits in memory" : "limits in Redis"}` : "local mode: no API key needed"}; models on ${describeDevice(o.resolvedDevice)}); ${o.slugs.length + o.locals.length > 0 ? `loading ${[...o.slugs, ...o.locals.map((l) => l.slug)].join(", ")}` : "models load on their first request"}\n`,
    );
    return true;
  }

  /** Pulls, compiles and loads each model in turn, until a signal stops the loading; one that fails is reported and the others go on. */
  private async loadModels(): Promise<void> {
    const { o, io, registry } = this;
    const printer = createProgressPrinter(io.stderr);
    const gate = this.gate;
    let kvMemoryReservedBytes = 0; // host KV budgets of the models loaded so far, which their caches grow into later
    const textOptions = textLoadOptions(o, gate);
    const onWarning = (message: string) => this.tell("warn")({}, message);
    if (this.promotionsDb) {
      this.watcher = new PromotionWatcher({
        db: this.promotionsDb,
        registry,
        device: o.resolvedDevice.device,
        // A replacement keeps the KV budget of the model it replaces, whose memory it takes over once that one has drained.
        load: (slug, promotion, signal, current) =>
          loadModel(slug, { ...textOptions, kvMemoryBytes: textOptions.kvMemoryBytes ?? current.kvMemoryBytes, promotion, fallback: false, signal, onWarning }),
        log: { info: this.tell("info"), warn: this.tell("warn"), error: this.tell("error") },
      });
    }
    for (const slug of o.slugs) {
      if (this.loading.signal.aborted) break;
      try {
        const onStage = (stage: string) => {
          printer.done();
          registry.stage(slug, stage);
          io.stderr.write(`${slug}: ${stage}\n`);
        };
        if (getModel(slug).kind === "transcription") {
          const model = await loadSpeechModel(slug, { ...speechLoadOptions(o, gate), onStage, signal: this.loading.signal, pull: { onProgress: printer } });
          printer.done();
          registry.serve(model);
          io.stderr.write(`${slug}: serving (artifact ${model.artifactId}; ${DEFAULT_SPEECH_SLOTS} transcriptions decoded together, beam ${o.beamSize})\n`);
          continue;
        }
        let promotion: Promotion | null | undefined;
        try {
          promotion = this.watcher?.claim(slug);
        } catch (err) {
          onWarning(`${slug}: cannot read its promotion (${(err as Error).message})`);
        }
        const model = await loadModel(slug, {
          ...textOptions,
          onStage,
          signal: this.loading.signal,
          pull: { onProgress: printer },
          kvMemoryReservedBytes,
          promotion,
          onWarning,
        });
        kvMemoryReservedBytes += hostKvMemoryBytes(model);
        printer.done();
        registry.serve(model);
        const kv = `KV cache up to ${Math.round((model.kvMemoryBytes ?? 0) / 2 ** 20)} MiB (${o.kvMemoryMb === undefined ? "default" : "--kv-memory-mb"})`;
        const context = `${model.contextLength} tokens per sequence x ${model.engine.stats.snapshot().slots} slots (native ${model.nativeContextLength})`;
        io.stderr.write(`${slug}: serving (artifact ${model.artifactId}, ${promotionNote(model, promotion ?? null)}; ${kv}; ${context})\n`);
      } catch (err) {
        printer.done();
        if (this.loading.signal.aborted) break;
        const message = err instanceof Error ? err.message : String(err);
        registry.fail(slug, message);
        io.stderr.write(`${slug}: failed to load: ${message}\n`);
      }
    }
    for (const local of o.locals) {
      if (this.loading.signal.aborted) break;
      await this.loadLocal(local, textOptions, kvMemoryReservedBytes);
      const state = registry.get(local.slug);
      if (state?.status === "serving" && state.model.kind === "text") kvMemoryReservedBytes += hostKvMemoryBytes(state.model);
    }
  }

  /** Compiles (or reuses) a local GGUF file's artifact and serves it under its slug; a failure is reported and the others go on. */
  private async loadLocal(local: LocalGguf, textOptions: LoadModelOptions, kvMemoryReservedBytes: number): Promise<void> {
    const { io, registry } = this;
    const onStage = (stage: string) => {
      registry.stage(local.slug, stage);
      io.stderr.write(`${local.slug}: ${stage}\n`);
    };
    try {
      const model = await loadLocalGguf(local, {
        ...textOptions,
        onStage,
        signal: this.loading.signal,
        kvMemoryReservedBytes,
        onWarning: (m) => this.tell("warn")({}, m),
      });
      registry.serve(model);
      const context = `${model.contextLength} tokens per sequence x ${model.engine.stats.snapshot().slots} slots (native ${model.nativeContextLength})`;
      io.stderr.write(`${local.slug}: serving ${local.path} (artifact ${model.artifactId}; ${context})\n`);
    } catch (err) {
      if (this.loading.signal.aborted) return;
      const message = err instanceof Error ? err.message : String(err);
      registry.fail(local.slug, message);
      io.stderr.write(`${local.slug}: failed to load ${local.path}: ${message}\n`);
    }
  }

  /**
   * Once the models serve: follow promotions (the live switch), and run the optimization tracks of
   * the text models served since the start (named at startup or loaded on demand since) on their
   * schedules, each in its own lower-priority process.
   */
  private startFollowing(): void {
    this.watcher?.start();
    if (!this.o.noNightly) {
      const registry = this.registry;
      this.stopNightly = startNightly({
        wanted: (slug) => registry.servedTextSinceStart(slug),
        onLog: (line) => this.logger.info({ component: "track" }, line),
      });
    }
  }

  /** The first signal drains, a second one exits at once. */
  private readonly onSignal = (signal: NodeJS.Signals): void => {
    if (this.stopping) {
      this.io.stderr.write(`kiln serve: ${signal} again: exiting now\n`);
      process.exit(130);
    }
    void this.stop(`${signal} received`);
  };

  /** Stops taking requests, lets the running ones finish (until --drain-timeout), then closes the models, the stores and the nightly track; once. */
  private stop(why: string): Promise<void> {
    if (this.stopping) return this.stopping;
    const { o, io } = this;
    io.stderr.write(`kiln serve: ${why}: no new requests; finishing the running ones (for up to ${o.drainTimeout} s)\n`);
    const drainTimeoutMs = o.drainTimeout * 1000;
    this.loading.abort();
    this.watcher?.stop();
    const nightlyStopped = this.stopNightly?.();
    exitIfStuck(drainTimeoutMs + STOP_GRACE_MS, io);
    this.stopping = (async () => {
      await drainApp(this.app!, this.lifecycle, { timeoutMs: drainTimeoutMs });
      await this.registry.close();
      await this.closeCloud();
      this.promotionsDb?.close();
      this.logger.flush?.();
      await nightlyStopped;
      this.resolveStopped();
    })();
    return this.stopping;
  }

  private async closeCloud(): Promise<void> {
    await this.cloud?.meter.close();
    await this.cloud?.store.close();
  }

  /** A log line the operator also reads on stderr, beside the JSON log. */
  private tell(level: "info" | "warn" | "error") {
    return (fields: Record<string, unknown>, message: string) => {
      this.logger[level](fields, message);
      this.io.stderr.write(`${level === "info" ? "" : `kiln serve: ${level === "warn" ? "WARNING" : "ERROR"}: `}${message}\n`);
    };
  }
}

/**
 * Whether the console may promote and roll back: on a loopback address, where whoever reaches the
 * console is on this machine, or in cloud mode, where the console's routes take them from an admin
 * key only. A local-mode server beyond loopback would let anyone on its network do it.
 */
export function offersOperatorActions(host: string, cloud: boolean): boolean {
  return cloud || isLoopbackHost(host);
}

/** Runs `action` on the records database, opened for it and closed after, as the CLI's commands do. */
function withDatabase<T>(action: (db: KilnDatabase) => T): T {
  const db = openDatabase();
  try {
    return action(db);
  } finally {
    db.close();
  }
}

/** One key's ledger by UTC day and model for the console's usage page: the models it used, then each one's days. */
function usageReport(store: CloudStore): UsageReport {
  return {
    async usage(keyId, since) {
      const models = await store.usage({ keyId, since, by: "model" });
      const days = await Promise.all(
        models.map(async (m) =>
          (await store.usage({ keyId, since, slug: m.group, by: "day" })).map((d) => ({
            day: d.group,
            model: m.group,
            requests: d.requests,
            promptTokens: d.promptTokens,
            completionTokens: d.completionTokens,
            audioMs: d.audioMs,
            costNanoUsd: String(d.costNanoUsd),
          })),
        ),
      );
      return days.flat().sort((a, b) => a.day.localeCompare(b.day) || a.model.localeCompare(b.model));
    },
  };
}
