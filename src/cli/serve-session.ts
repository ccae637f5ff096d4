/** One `kiln serve`: the stores, the HTTP app, the models and their following, then the drain (the command and its options: `commands/serve.ts`). */
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import { buildApp, checksKeys, drainApp, exposureWarning, Lifecycle, isLoopbackHost, type AuthMode, type UsageReport } from "../api/index.js";
import {
  CloudMeter,
  createRedisLimits,
  isPostgresUrl,
  KeyStore,
  loadKeySecret,
  MemoryLimits,
  openCloudStore,
  SpooledUsageRecorder,
  storeUsageLedger,
  usageSpoolPath,
  type CloudStore,
  type SharedStores,
} from "../cloud/index.js";
import { getModel, hasModel } from "../catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../catalogue/db.js";
import { createProgressPrinter } from "../catalogue/pull/progress.js";
import type { Promotion } from "../catalogue/promotions.js";
import { SqliteBatchStore } from "../catalogue/stored-batches.js";
import { SqliteFileStore } from "../catalogue/stored-files.js";
import { SqliteResponseStore } from "../catalogue/stored-responses.js";
import {
  DEFAULT_SPEECH_SLOTS,
  loadLocalGguf,
  type LocalGguf,
  loadModel,
  type LoadModelOptions,
  loadSpeechModel,
  type LoadSpeechModelOptions,
  OnDemandLoader,
  PromotionWatcher,
} from "../provision/index.js";
import { ComputeGate, hostKvMemoryBytes, ModelRegistry, type ServedModel } from "../scheduler/index.js";
import { machineMemoryBytes } from "../compiler/compilability.js";
import type { CommandIO } from "./command.js";
import type { ServeArgs, ServeOptionName } from "./commands/serve.js";
import { chooseDevice, describeDevice, serverDevice } from "./device-option.js";
import { UsageError } from "./options.js";
import { startNightly, trackHistory, trend } from "../track/index.js";
import { promote } from "./commands/promote.js";
import { rollBack } from "./commands/rollback.js";

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

/**
 * How text models load, at start and at a live switch: a flag the operator gave wins over the
 * settings of a promoted artifact, which win over the flag's default (so only given flags are passed).
 */
function textLoadOptions(o: ServeArgs, gate: ComputeGate | undefined): LoadModelOptions {
  const given = <K extends ServeOptionName>(key: K) => (o.given.has(key) ? o[key] : undefined);
  return {
    threads: given("threads"),
    maxRunning: given("maxRunning"),
    prefillChunk: given("prefillChunk"),
    prefixReuse: given("prefixReuse"),
    draftTokens: o.draftTokens,
    thinkingBudget: o.thinkingBudget,
    pooling: o.pooling,
    session: { device: o.resolvedDevice.device },
    deviceActivations: o.activations,
    adapterMemory: o.resolvedDevice.adapter?.memory,
    maxWaiting: o.maxWaiting,
    kvMemoryBytes: o.kvMemoryMb === undefined ? undefined : o.kvMemoryMb * 1024 * 1024,
    gate,
    ...(o.chatTemplate !== undefined ? { chatTemplate: o.chatTemplate } : {}),
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

/** Runs the server until a signal has drained it; the exit code. */
export async function serve(o: Omit<ServeArgs, "resolvedDevice">, io: CommandIO): Promise<number> {
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
  private auth: AuthMode;
  private cloud: { store: CloudStore; meter: CloudMeter } | null = null;
  /** Promotions choose each text model's artifact at start, and are followed while serving (the live switch); null when the database cannot be opened. */
  private promotionsDb: KilnDatabase | null = null;
  private memoryDb: KilnDatabase | null = null;
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
    this.auth = { mode: "local", keys: o.apiKeys };
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

  /**
   * Stored responses, files and batches: in a fleet's Postgres, where every replica finds them (and
   * another takes over a gone one's batches); else in the records database beside the promotions (so
   * an unfinished batch resumes when the server starts again), or in memory for this process only
   * when that cannot be opened or only read.
   */
  private clientStores(): SharedStores {
    const retention = { maxCount: this.o.storedResponses, maxAgeSeconds: this.o.storedResponseDays * 86_400 };
    const shared = this.cloud?.store.sharedStores?.(retention);
    if (shared) return shared;
    const db = this.recordsDb();
    return { responses: new SqliteResponseStore(db, retention), files: new SqliteFileStore(db), batches: new SqliteBatchStore(db) };
  }

  /** Where the server keeps what its clients store: the records database beside the promotions, or one in memory for this process when that cannot be opened or only read. */
  private recordsDb(): KilnDatabase {
    if (this.promotionsDb && !this.promotionsDb.readonly) return this.promotionsDb;
    this.memoryDb ??= openDatabase({ path: ":memory:", seed: false });
    return this.memoryDb;
  }

  /** The HTTP app over the registry (empty yet); a host beyond loopback without key checks is warned about here and in /health. */
  private async createApp(): Promise<void> {
    const o = this.o;
    const warning = exposureWarning(o.host, checksKeys(this.auth));
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
      ...this.clientStores(),
      batchConcurrency: o.batchConcurrency,
      batchPrice: o.batchPrice,
      batchLeaseMs: o.orphanTimeout * 1000,
      allowedOrigins: this.o.origins,
      tls: o.tls,
      // The console's track pages, read as `kiln tracks --json` reads them; empty without the records database.
      tracks: {
        history: (slug) => {
          const db = this.promotionsDb;
          return db ? { ...trackHistory(db, slug), trend: trend(db, slug) } : { slug, current: null, candidates: [], trend: [] };
        },
        // As `kiln promote` and `kiln rollback` do, in a database opened for writing; the promotion watcher switches live.
        ...(offersOperatorActions(o.host, checksKeys(this.auth))
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
    this.url = `${o.tls ? "https" : "http"}://${o.host.includes(":") ? `[${o.host}]` : o.host}:${port}/v1`;
    const mode = cloud
      ? `cloud mode: API keys checked, ${cloud.store.kind} database, ${o.limits === "memory" ? "limits in memory" : "limits in Redis"}`
      : o.apiKeys.length > 0
        ? `local mode: API key${o.apiKeys.length > 1 ? "s" : ""} of --api-key checked`
        : "local mode: no API key needed";
    io.stderr.write(
      `kiln serve: listening on ${this.url} (${mode}; models on ${describeDevice(o.resolvedDevice)}); ${o.slugs.length + o.locals.length > 0 ? `loading ${[...o.slugs, ...o.locals.map((l) => l.slug)].join(", ")}` : "models load on their first request"}\n`,
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
        wantedWhen: "for a text model served since the start",
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
 * console is on this machine; in cloud mode, where the console's routes take them from an admin key
 * only; or with local mode's shared keys (`checksKeys`), whose holders are the server's operators.
 * A local-mode server beyond loopback without them would let anyone on its network do it.
 */
export function offersOperatorActions(host: string, checksKeys: boolean): boolean {
  return checksKeys || isLoopbackHost(host);
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
