/** `kiln serve --model <slug>...`: the OpenAI-compatible HTTP API over the given models. */
import pino from "pino";
import { buildApp, drainApp, KeyStore, Lifecycle, sqliteUsageRecorder, type AuthMode, type UsageRecorder } from "../../api/index.js";
import { getModel, hasModel, UnknownModelError } from "../../catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../../catalogue/db.js";
import { createProgressPrinter } from "../../catalogue/pull/progress.js";
import { compileModel } from "../../compiler/compile-model.js";
import { TextRuntime } from "../../runtime/text-runtime.js";
import { DEFAULT_MAX_RUNNING, DEFAULT_MAX_WAITING, DEFAULT_PREFILL_CHUNK, ModelRegistry, textModel, type PrefixReuse } from "../../scheduler/index.js";
import type { CommandIO } from "../command.js";

export const name = "serve";
export const description = "Serve models over the OpenAI-compatible HTTP API";
/** 4 GiB: SmolLM2-135M keeps its whole 8,192-token context in 11 slots, or 5,760 tokens in 16. */
const DEFAULT_KV_MEMORY_MB = 4096;

export const usage = `Usage: kiln serve --model <slug> [--model <slug>...] [options]

Starts the HTTP API at http://<host>:<port>/v1 (chat/completions, completions, models), then
pulls, compiles and loads each model (progress on stderr). GET /health answers 503 until the
models are loaded, then 200. SIGTERM or Ctrl-C stops taking requests and exits once the running
ones have finished (a second Ctrl-C exits at once).

Options:
  --model <slug>     a model to serve (repeatable; at least one; see \`kiln models\`)
  --port N           TCP port (default 8000; 0 picks a free one)
  --host H           address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)
  --cloud            check API keys against $KILN_HOME/kiln.sqlite (see \`kiln keys\`) and record
                     usage; default: local mode, where any non-empty key is accepted
  --threads N        ONNX Runtime threads per model (default 2)
  --max-running N    sequences generating at once per model, batched into each step: the model's
                     KV slots (default ${DEFAULT_MAX_RUNNING}; each choice of a request takes one)
  --max-waiting N    requests queued per model before new ones get 503 (default ${DEFAULT_MAX_WAITING})
  --prefill-chunk N  prompt tokens computed per model call; long prompts go in chunks between
                     the others' tokens (default ${DEFAULT_PREFILL_CHUNK})
  --prefix-reuse P   reuse of cached prompt prefixes across requests: exact (default; whole prefill
                     chunks, results identical to a fresh prefill), any (every cached position,
                     e.g. short shared system prompts; results may differ slightly), off
  --kv-memory-mb N   KV cache budget per model, all slots together; caps each sequence's context
                     to what fits (default ${DEFAULT_KV_MEMORY_MB})
  --log-level L      fatal, error, warn, info, debug, trace or silent (default $KILN_LOG_LEVEL or info);
                     logs are JSON lines on stderr
  -h, --help         show this help`;

interface ServeOptions {
  slugs: string[];
  port: number;
  host: string;
  cloud: boolean;
  threads: number;
  maxRunning: number;
  maxWaiting: number;
  prefillChunk: number;
  /** KV cache budget per model, in MiB. */
  kvMemoryMb: number;
  prefixReuse: PrefixReuse;
  logLevel: string;
}


const LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

function parse(argv: string[]): ServeOptions | string {
  const o: ServeOptions = {
    slugs: [],
    port: 8000,
    host: "127.0.0.1",
    cloud: false,
    threads: 2,
    maxRunning: DEFAULT_MAX_RUNNING,
    maxWaiting: DEFAULT_MAX_WAITING,
    prefillChunk: DEFAULT_PREFILL_CHUNK,
    kvMemoryMb: DEFAULT_KV_MEMORY_MB,
    prefixReuse: "exact",
    logLevel: process.env.KILN_LOG_LEVEL || "info",
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = argv[i + 1];
    const int = (min: number, max: number): number | null => {
      i++;
      const n = Number(value);
      return value !== undefined && value !== "" && Number.isInteger(n) && n >= min && n <= max ? n : null;
    };
    const text = (): string | null => (i++, value && !value.startsWith("-") ? value : null);
    if (arg === "--model" || arg === "-m") {
      const slug = text();
      if (slug === null) return "--model needs a slug";
      o.slugs.push(slug);
    } else if (arg === "--port") {
      const n = int(0, 65535);
      if (n === null) return "--port needs an integer from 0 to 65535";
      o.port = n;
    } else if (arg === "--threads") {
      const n = int(1, 256);
      if (n === null) return "--threads needs an integer from 1 to 256";
      o.threads = n;
    } else if (arg === "--max-running") {
      const n = int(1, 256);
      if (n === null) return "--max-running needs an integer from 1 to 256";
      o.maxRunning = n;
    } else if (arg === "--prefill-chunk") {
      const n = int(1, 8192);
      if (n === null) return "--prefill-chunk needs an integer from 1 to 8192";
      o.prefillChunk = n;
    } else if (arg === "--prefix-reuse") {
      const v = text();
      if (v !== "exact" && v !== "any" && v !== "off") return "--prefix-reuse needs exact, any or off";
      o.prefixReuse = v;
    } else if (arg === "--kv-memory-mb") {
      const n = int(1, 1_048_576);
      if (n === null) return "--kv-memory-mb needs an integer from 1 to 1048576";
      o.kvMemoryMb = n;
    } else if (arg === "--max-waiting") {
      const n = int(0, 100_000);
      if (n === null) return "--max-waiting needs an integer from 0 to 100000";
      o.maxWaiting = n;
    } else if (arg === "--host") {
      const host = text();
      if (host === null) return "--host needs an address";
      o.host = host;
    } else if (arg === "--log-level") {
      o.logLevel = text() ?? "";
    } else if (arg === "--cloud") {
      o.cloud = true;
    } else {
      return `unknown argument ${arg}`;
    }
  }
  if (o.slugs.length === 0) return "which model? (--model <slug>, see `kiln models`)";
  if (!LEVELS.includes(o.logLevel)) return `--log-level must be one of ${LEVELS.join(", ")}`;
  for (const slug of o.slugs) {
    if (!hasModel(slug)) return new UnknownModelError(slug).message;
    if (getModel(slug).kind !== "text") return `${slug} is a ${getModel(slug).kind} model; kiln serve handles text models for now`;
  }
  o.slugs = [...new Set(o.slugs)];
  return o;
}

export async function run(argv: string[], io: CommandIO = process): Promise<number> {
  if (argv.includes("-h") || argv.includes("--help")) {
    io.stdout.write(usage + "\n");
    return 0;
  }
  const parsed = parse(argv);
  if (typeof parsed === "string") {
    io.stderr.write(`kiln serve: ${parsed}\n${usage}\n`);
    return 2;
  }
  const o = parsed;
  const logger = pino({ level: o.logLevel, base: { pid: process.pid } }, pino.destination(2));
  const registry = new ModelRegistry();
  for (const slug of o.slugs) registry.expect(slug);
  const lifecycle = new Lifecycle();

  let db: KilnDatabase | null = null;
  let auth: AuthMode = { mode: "local" };
  let usageRecorder: UsageRecorder | undefined;
  if (o.cloud) {
    db = openDatabase();
    auth = { mode: "cloud", keys: new KeyStore(db) };
    usageRecorder = sqliteUsageRecorder(db, (slug) => (hasModel(slug) ? getModel(slug) : undefined));
  }

  const app = await buildApp({ models: registry, auth, logger, usage: usageRecorder, lifecycle });
  try {
    await app.listen({ port: o.port, host: o.host });
  } catch (err) {
    io.stderr.write(`kiln serve: cannot listen on ${o.host}:${o.port}: ${(err as Error).message}\n`);
    db?.close();
    return 1;
  }
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : o.port;
  const url = `http://${o.host.includes(":") ? `[${o.host}]` : o.host}:${port}/v1`;
  io.stderr.write(`kiln serve: listening on ${url} (${o.cloud ? "cloud mode: API keys checked" : "local mode: any API key"}); loading ${o.slugs.join(", ")}\n`);

  // Shutdown: the first signal drains, a second one exits at once.
  const loading = new AbortController();
  let stopping: Promise<void> | null = null;
  let resolveStopped!: () => void;
  const stopped = new Promise<void>((resolve) => (resolveStopped = resolve));
  const stop = (why: string) => {
    if (stopping) return stopping;
    io.stderr.write(`kiln serve: ${why}: no new requests; finishing the running ones\n`);
    loading.abort();
    stopping = (async () => {
      await drainApp(app, lifecycle);
      await registry.close();
      db?.close();
      logger.flush?.();
      resolveStopped();
    })();
    return stopping;
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      io.stderr.write(`kiln serve: ${signal} again: exiting now\n`);
      process.exit(130);
    }
    void stop(`${signal} received`);
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);

  try {
    const printer = createProgressPrinter(io.stderr);
    for (const slug of o.slugs) {
      if (loading.signal.aborted) break;
      try {
        const onStage = (stage: string) => {
          registry.stage(slug, stage);
          io.stderr.write(`${slug}: ${stage}\n`);
        };
        const compiled = await compileModel(slug, { onStage, pull: { signal: loading.signal, onProgress: printer } });
        printer.done();
        onStage("loading the model");
        const runtime = await TextRuntime.load(compiled.dir, { threads: o.threads, slots: o.maxRunning });
        if (loading.signal.aborted) {
          await runtime.close();
          break;
        }
        registry.serve(textModel(runtime, { maxWaiting: o.maxWaiting, maxRunning: o.maxRunning, prefillChunk: o.prefillChunk, kvMemoryBytes: o.kvMemoryMb * 1024 * 1024, prefixReuse: o.prefixReuse }));
        io.stderr.write(`${slug}: serving (artifact ${compiled.manifest.id})\n`);
      } catch (err) {
        printer.done();
        if (loading.signal.aborted) break;
        const message = err instanceof Error ? err.message : String(err);
        registry.fail(slug, message);
        io.stderr.write(`${slug}: failed to load: ${message}\n`);
      }
    }
    if (!loading.signal.aborted) {
      if (!registry.all().some((s) => s.status === "serving")) {
        await stop("no model could be loaded");
        return 1;
      }
      io.stderr.write(`kiln serve: ready at ${url}\n`);
    }
    await stopped;
    io.stderr.write("kiln serve: stopped\n");
    return 0;
  } finally {
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
  }
}

export default { name, description, usage, run };
