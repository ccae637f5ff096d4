/** `kiln serve --model <slug>...`: the OpenAI-compatible HTTP API over the given models. The server itself is `serve-session.ts`, loaded when it starts, so that help and option errors come without loading it. */
import { originProblem } from "../../api/cors.js";
import { DEFAULT_BATCH_CONCURRENCY, DEFAULT_BATCH_PRICE, DEFAULT_DRAIN_TIMEOUT_MS } from "../../api/defaults.js";
import { DEFAULT_MAX_STORED_RESPONSES, DEFAULT_STORED_RESPONSE_DAYS } from "../../catalogue/stored-responses.js";
import { DEFAULT_ORPHAN_AFTER_MS } from "../../cloud/defaults.js";
import { DEFAULT_BEAM_SIZE } from "../../provision/defaults.js";
import type { LocalGguf } from "../../provision/index.js";
import type { DeviceDecision } from "../../runtime/device/choose.js";
import { DEFAULT_KEEP_ALIVE_MS, DEFAULT_MAX_RUNNING, DEFAULT_MAX_WAITING, DEFAULT_POOLING, DEFAULT_PREFILL_CHUNK } from "../../scheduler/defaults.js";
import { databaseOption, keySecretFileOption } from "../cloud-options.js";
import { defineCommand } from "../command.js";
import { chatTemplateFileOption, chatTemplateFrom } from "../chat-template-option.js";
import { sslCertfileOption, sslKeyfileOption, tlsFrom } from "../tls-options.js";
import { draftTokensOption } from "../draft-tokens-option.js";
import { thinkingBudgetOption } from "../thinking-budget-option.js";
import { activationsOption, deviceOption } from "../device-option.js";
import { option, UsageError, type OptionValues } from "../options.js";

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
  apiKey: option.string({
    value: "<key>",
    multiple: true,
    env: "KILN_API_KEY",
    description:
      "local mode: a key every request must carry (Authorization: Bearer <key>, or x-api-key), as vLLM's and llama.cpp's --api-key; repeatable, and $KILN_API_KEY may hold several, comma-separated. /metrics then takes it too; /health stays open. Default none: any key or none is taken. Not with --cloud, whose keys come from `kiln keys`",
  }),
  sslKeyfile: sslKeyfileOption,
  sslCertfile: sslCertfileOption,
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
    description:
      "cloud mode: a replica silent this long is taken for dead, and the requests it was serving are charged from their reservations; also how long this server's hold on a Batch API batch lasts unrenewed, after which another server (a fleet's replica, or this one started again) takes the batch over",
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
  draftTokens: draftTokensOption,
  thinkingBudget: thinkingBudgetOption,
  pooling: option.choice(["last", "mean"], {
    default: DEFAULT_POOLING,
    description:
      "how embeddings (/v1/embeddings, Ollama's /api/embed, llama.cpp's /embedding) pool an input's final hidden states: last (the last position's, which alone has read the whole input; as vLLM and Ollama embed with a generative model) or mean (every position's average)",
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
      "most Responses API responses kept (store: true, the default) for previous_response_id and GET /v1/responses/{id}, in $KILN_HOME/kiln.sqlite (in --cloud mode with a postgres:// --database, there, for the whole fleet); the oldest are deleted first; 0 keeps none",
  }),
  storedResponseDays: option.number({
    value: "<days>",
    min: 0,
    max: 36_500,
    default: DEFAULT_STORED_RESPONSE_DAYS,
    description: "days a stored Responses API response is kept; older ones are neither found nor continued, and are deleted",
  }),
  batchConcurrency: option.integer({
    value: "<count>",
    min: 1,
    max: 4096,
    default: DEFAULT_BATCH_CONCURRENCY,
    description:
      "most requests of Batch API batches (POST /v1/batches) answered at once, beside interactive requests; batches, their files and their progress are kept in $KILN_HOME/kiln.sqlite (in --cloud mode with a postgres:// --database, there, for the whole fleet), and an unfinished one resumes when the server starts again",
  }),
  batchPrice: option.number({
    value: "<fraction>",
    min: 0,
    max: 1,
    default: DEFAULT_BATCH_PRICE,
    description:
      "cloud mode: what a Batch API request pays, as a fraction of the model's prices (0.5: half price, as the reference API charges batches; 1: in full)",
  }),
  chatTemplateFile: chatTemplateFileOption("for every text model this server serves, so serve one with it"),
  noNightly: option.flag({
    description:
      "do not run the optimization tracks (compiler-jobs/<slug>.json) of the text models served since the start (named or loaded on demand) on their schedules; by default each runs as its own lower-priority process",
  }),
};

export default defineCommand({
  name: "serve",
  description: "Serve models over the OpenAI-compatible HTTP API",
  intro: `Starts the HTTP API at http://<host>:<port>/v1 (https:// with --ssl-keyfile; chat/completions,
completions, responses, audio/transcriptions, models), then pulls, compiles and loads each model (progress on stderr).
GET /health answers 503 until the models are loaded, then 200. SIGTERM or Ctrl-C stops taking
requests and exits once the running ones have finished, or after --drain-timeout, ending the ones
left with an error (a second Ctrl-C exits at once). A --host beyond loopback without --cloud or
--api-key lets anyone on the network in: kiln warns about it on stderr and in GET /health. A text model serves its
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
    const { checkLocalModels, splitModelArgs } = await import("../local-models.js");
    const { serve } = await import("../serve-session.js");
    const models = splitModelArgs(commandLine.options.model ?? []);
    return serve(
      {
        ...commandLine.options,
        slugs: models.slugs,
        locals: await checkLocalModels(models.files),
        origins: allowedOrigins(commandLine.options.allowedOrigins),
        apiKeys: sharedKeys(commandLine.options.apiKey, commandLine.options.cloud),
        tls: await tlsFrom(commandLine.options.sslKeyfile, commandLine.options.sslCertfile),
        chatTemplate: await chatTemplateFrom(commandLine.options.chatTemplateFile),
        given: commandLine.given,
      },
      io,
    );
  },
});

/** A served option's name. */
export type ServeOptionName = keyof typeof options;

/** The options as parsed and checked, with what the command resolved from them. */
export type ServeArgs = OptionValues<typeof options> & {
  slugs: string[];
  /** The GGUF files on this machine to serve, checked. */
  locals: LocalGguf[];
  origins: string[];
  /** Local mode's shared keys (--api-key), checked: each non-empty, none with --cloud. */
  apiKeys: string[];
  /** What HTTPS serves with (--ssl-keyfile, --ssl-certfile), read and checked; undefined for plain HTTP. */
  tls: { key: Buffer; cert: Buffer } | undefined;
  /** The source of --chat-template-file, checked to parse. */
  chatTemplate?: string;
  given: ReadonlySet<ServeOptionName>;
  /** What --device resolved to on this machine: the device every model loads on, and its adapter. */
  resolvedDevice: DeviceDecision;
};

/** `--api-key`, each given and each comma-separated one (from $KILN_API_KEY); a usage error beside --cloud, whose keys are `kiln keys`'. */
function sharedKeys(given: string[], cloud: boolean): string[] {
  const keys = given
    .flatMap((g) => g.split(","))
    .map((k) => k.trim())
    .filter((k) => k !== "");
  if (given.length > 0 && keys.length === 0) throw new UsageError("--api-key: the key is empty");
  if (keys.length > 0 && cloud) throw new UsageError("--api-key is for local mode: with --cloud, keys come from `kiln keys create`");
  return keys;
}

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
