/** GET /v1/models and /v1/models/{id}: a catalogue entry plus its serving state, as the wire shows it. */
import type { Promotion } from "../../catalogue/promotions.js";
import type { Capability, ModelEntry } from "../../catalogue/types.js";
import type { ComputeDevice } from "../../runtime/device/index.js";
import type { ModelAvailability, ModelState } from "../../scheduler/index.js";

/** The devices a served model may run on: onnxruntime's CPU provider, or its WebGPU provider. */
export type ServedDevice = ComputeDevice;

/** kiln's serving state of a model: answering requests, being loaded, failed to load, or only in the catalogue. */
export type ModelStatus = "serving" | "loading" | "failed" | "available";

export interface ModelObject {
  id: string;
  object: "model";
  /** Anthropic's `type` of the object, for clients of its Models API. */
  type: "model";
  /** Unix seconds: when the artifact in service was built, else when this server started. */
  created: number;
  /** `created` as an RFC 3339 time, as Anthropic's Models API gives it. */
  created_at: string;
  owned_by: string;
  display_name: string;
  kind: ModelEntry["kind"];
  /**
   * Tokens a request may use, prompt plus completion: on a served model the window its KV budget
   * allows (prompts past it get `context_length_exceeded`), else the catalogue's window.
   */
  context_length: number;
  /** `context_length` under vLLM's name, which clients written for vLLM read to size their prompts. */
  max_model_len: number;
  /** The model's own context window, in tokens (at least `context_length`). */
  native_context_length: number;
  capabilities: readonly string[];
  pricing: {
    input_usd_per_million_tokens?: number;
    output_usd_per_million_tokens?: number;
    usd_per_audio_minute?: number;
  };
  status: ModelStatus;
  /**
   * Whether this server (this replica, in a fleet) answers for the model now: `served` (loaded),
   * `loadable` (pulled here: loaded on its first request) or `not_pulled` (`kiln pull` it first,
   * unless the server pulls on demand).
   */
  availability?: ModelAvailability;
  /** Where the model runs on this server, as it was loaded: `cpu` or `webgpu`; served models only. */
  device?: ServedDevice;
  /** The GGUF file a model served from a local file (`kiln serve --model ./file.gguf`) was compiled from; such models only. */
  local_path?: string;
  /** Id of the compiled artifact in service (the `system_fingerprint` of its answers); served models only. */
  artifact_id?: string;
  /**
   * Output tokens per second measured on this server so far with the artifact in service (null
   * before any request); served text models only.
   */
  measured_output_tokens_per_second?: number | null;
  /**
   * Unix seconds: when the artifact in service was promoted (by the optimization track or an
   * operator); null while the default compile serves. Served text models only.
   */
  last_optimized_at?: number | null;
  /** Why and with what the artifact in service was promoted; null while the default compile serves. Served text models only. */
  optimization?: OptimizationInfo | null;
}

export interface OptimizationInfo {
  /** The reason recorded with the promotion ("track: 12% faster decode, KL 0.004", "operator"). */
  reason: string;
  /** Runtime and serving settings promoted with the artifact ({} = defaults). */
  settings: Record<string, unknown>;
  /** What the track measured for it (throughput, TTFT, memory), as recorded. */
  metrics: Record<string, unknown>;
  /** Its measured quality against the exact reference (KL divergence, perplexity ratio), as recorded. */
  quality: Record<string, unknown>;
}

export interface ModelList {
  object: "list";
  data: ModelObject[];
  /** Anthropic's paging fields: the whole list comes in one page. */
  has_more: false;
  first_id: string | null;
  last_id: string | null;
}

/** The list of `data`, with the fields of OpenAI's list and of Anthropic's page. */
export function modelList(data: ModelObject[]): ModelList {
  return { object: "list", data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
}

/** Who publishes the weights: the owner part of the upstream repository. */
function ownerOf(entry: ModelEntry): string {
  const slash = entry.upstream.indexOf("/");
  return slash > 0 ? entry.upstream.slice(0, slash) : entry.family;
}

/**
 * What kiln itself can do with a model of the catalogue: a capability the model has but kiln does
 * not serve is not advertised, so clients never pick a feature that answers 400.
 */
const SERVED_CAPABILITIES: ReadonlySet<string> = new Set([
  "chat",
  "completions",
  "tools",
  "json_schema",
  "streaming",
  "transcription",
  "reasoning",
  "embeddings",
]);

export function modelObject(
  entry: ModelEntry,
  state: ModelState | undefined,
  startedAt: number,
  measuredTps: number | null,
  availability?: ModelAvailability,
): ModelObject {
  const p = entry.prices;
  const pricing: ModelObject["pricing"] =
    entry.kind === "transcription"
      ? { usd_per_audio_minute: p.usdPerAudioMinute }
      : { input_usd_per_million_tokens: p.inputUsdPerMillionTokens, output_usd_per_million_tokens: p.outputUsdPerMillionTokens };
  const serving = state?.status === "serving" ? state.model : null;
  // Only a text model's window can be cut by a KV budget, and only its output is measured in tokens.
  const text = serving?.kind === "text" ? serving : null;
  const created = serving ? Math.floor(Date.parse(serving.artifactCreatedAt) / 1000) : NaN;
  const createdSeconds = Number.isFinite(created) ? created : startedAt;
  return {
    id: entry.slug,
    object: "model",
    type: "model",
    created: createdSeconds,
    created_at: new Date(createdSeconds * 1000).toISOString(),
    owned_by: ownerOf(entry),
    display_name: entry.displayName,
    kind: entry.kind,
    context_length: text?.contextLength ?? entry.contextLength,
    max_model_len: text?.contextLength ?? entry.contextLength,
    native_context_length: text?.nativeContextLength ?? entry.contextLength,
    capabilities: capabilitiesOf(entry, text),
    pricing,
    status: state?.status ?? "available",
    ...(availability ? { availability } : {}),
    ...(serving ? { device: serving.device ?? "cpu", artifact_id: serving.artifactId } : {}),
    ...(text ? { measured_output_tokens_per_second: measuredTps, ...optimizationOf(text.promotion ?? null) } : {}),
  };
}

/**
 * The catalogue's capabilities that kiln serves, and `embeddings` for a text model (kiln pools any
 * text model's hidden states); a served model's chat template has the last word on reasoning
 * (`--chat-template-file` may change it).
 */
function capabilitiesOf(entry: ModelEntry, served: { reasoning: unknown } | null): Capability[] {
  const listed = entry.capabilities.filter((c) => SERVED_CAPABILITIES.has(c) && c !== "reasoning" && c !== "embeddings");
  const reasons = served ? served.reasoning !== null : entry.capabilities.includes("reasoning");
  return [...listed, ...(reasons ? (["reasoning"] as const) : []), ...(entry.kind === "text" ? (["embeddings"] as const) : [])];
}

function optimizationOf(promotion: Promotion | null): Pick<ModelObject, "last_optimized_at" | "optimization"> {
  if (!promotion) return { last_optimized_at: null, optimization: null };
  const at = Math.floor(Date.parse(promotion.createdAt) / 1000);
  return {
    last_optimized_at: Number.isFinite(at) ? at : null,
    optimization: { reason: promotion.reason, settings: promotion.settings, metrics: promotion.metrics, quality: promotion.quality },
  };
}
