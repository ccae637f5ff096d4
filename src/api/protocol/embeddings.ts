/**
 * POST /v1/embeddings: each input's embedding, in the reference API's shape. Request schema, the
 * vector's final form (cut to `dimensions`, made unit length) and its wire encodings.
 */
import { z } from "zod";
import { chatMessage } from "./chat-completions.js";
import { knownFields, rejectUnsupported, unknownFields, type UnsupportedField } from "./common.js";
import { parseOrThrow } from "./issues.js";

/** Most inputs in one request, as in the reference API. */
export const MAX_EMBEDDING_INPUTS = 2048;

const tokenIds = z.array(z.number().int().min(0));

export const embeddingRequestSchema = z
  .object({
    model: z.string().min(1),
    // The reference API's four shapes: a string, strings, token ids, lists of token ids. Exactly one of `input` and `messages`.
    input: z.union([z.string(), z.array(z.string()), tokenIds, z.array(tokenIds)]).nullish(),
    /** vLLM's extension: a chat, rendered through the model's template as one input (for embedders trained on an instruction format). */
    messages: z.array(chatMessage).min(1).nullish(),
    /** `messages` only: end with the assistant turn's opening. Default false (vLLM's default for embeddings). */
    add_generation_prompt: z.boolean().nullish(),
    /** `messages` only: leave the last message, an assistant's, open. Default false. */
    continue_final_message: z.boolean().nullish(),
    /** `messages` only: more variables for the chat template. */
    chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
    /** "float" (a JSON array) or "base64" (the little-endian float32 bytes, which the official clients ask for). Default "float". */
    encoding_format: z.enum(["float", "base64"]).nullish(),
    /** Keep the vector's first this many values, made unit length again (as Ollama does for any model). Default: all of them. */
    dimensions: z.number().int().min(1).nullish(),
    user: z.string().nullish(),
    /** vLLM's extension: only each input's last this many tokens are embedded; -1 keeps as many as the context holds. */
    truncate_prompt_tokens: z
      .number()
      .int()
      .min(-1)
      .refine((v) => v !== 0, "'truncate_prompt_tokens' keeps the input's last tokens: at least 1, or -1 for as many as fit.")
      .nullish(),
    /** vLLM's extension: put the model's BOS (and EOS, where its vocabulary asks for one) around text inputs. Default true. */
    add_special_tokens: z.boolean().nullish(),
    /** vLLM's extension: false answers the pooled vector as it is, not made unit length. Default true. */
    normalize: z.boolean().nullish(),
  })
  .superRefine((r, ctx) => {
    if ((r.input == null) === (r.messages == null)) {
      ctx.addIssue({
        code: "custom",
        path: [r.input == null ? "input" : "messages"],
        message: "Send exactly one of 'input' (texts or token ids) and 'messages' (a chat).",
        params: { code: r.input == null ? "missing_required_parameter" : "invalid_value" },
      });
      return;
    }
    for (const k of ["add_generation_prompt", "continue_final_message", "chat_template_kwargs"] as const) {
      if (r[k] != null && r.messages == null)
        ctx.addIssue({ code: "custom", path: [k], message: `'${k}' applies to a chat: send 'messages'.`, params: { code: "invalid_value" } });
    }
    if (r.input == null) return;
    const inputs = Array.isArray(r.input) && typeof r.input[0] !== "number" ? (r.input as Array<string | number[]>) : [r.input as string | number[]];
    if (Array.isArray(r.input) && r.input.length === 0) {
      ctx.addIssue({ code: "custom", path: ["input"], message: "'input' must not be an empty array." });
    } else if (inputs.length > MAX_EMBEDDING_INPUTS) {
      ctx.addIssue({ code: "custom", path: ["input"], message: `'input' holds ${inputs.length} inputs: send at most ${MAX_EMBEDDING_INPUTS} per request.` });
    } else {
      const empty = inputs.findIndex((i) => i.length === 0);
      if (empty !== -1)
        ctx.addIssue({
          code: "custom",
          path: ["input"],
          message: `'input' ${inputs.length > 1 ? `[${empty}] ` : ""}is empty: each input needs at least one character or token id.`,
        });
    }
  });

export type EmbeddingRequest = z.output<typeof embeddingRequestSchema>;

const REFUSED: readonly UnsupportedField[] = [
  { field: "chat_template", why: "is not supported: the model's own chat template renders the chat (`kiln serve --chat-template-file` sets another)." },
];

const KNOWN = knownFields(embeddingRequestSchema, REFUSED);

export function parseEmbeddingRequest(body: unknown): EmbeddingRequest {
  const request = parseOrThrow(embeddingRequestSchema, body);
  rejectUnsupported(body as Record<string, unknown>, REFUSED);
  return request;
}

/** The request's top-level fields that no embeddings field names (ignored, and named back in `x-kiln-ignored-fields`). */
export function ignoredEmbeddingFields(body: unknown): string[] {
  return unknownFields(body, KNOWN);
}

/** The request's inputs, in order: each a string or token ids. */
export function embeddingInputs(input: NonNullable<EmbeddingRequest["input"]>): Array<string | number[]> {
  if (typeof input === "string") return [input];
  if (typeof input[0] === "number") return [input as number[]];
  return input as Array<string | number[]>;
}

/**
 * The vector a client gets: its first `dimensions` values (all without), divided by their Euclidean
 * length when `normalize` (a zero vector stays zero), in float64 as JSON writes it.
 */
export function finalVector(pooled: Float32Array, dimensions: number | null | undefined, normalize: boolean): Float64Array {
  const kept = Float64Array.from(dimensions ? pooled.subarray(0, dimensions) : pooled);
  if (!normalize) return kept;
  let squares = 0;
  for (const v of kept) squares += v * v;
  const length = Math.sqrt(squares);
  if (length > 0) for (let i = 0; i < kept.length; i++) kept[i] /= length;
  return kept;
}

/** The reference API's `base64` encoding: the vector's float32 values, little-endian, as base64. */
export function base64Floats(vector: Float64Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i], i * 4);
  return bytes.toString("base64");
}

/** One input's entry of the answer. */
export interface EmbeddingData {
  object: "embedding";
  index: number;
  embedding: number[] | string;
}

/** The whole answer. */
export interface EmbeddingList {
  object: "list";
  data: EmbeddingData[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

/** The answer for vectors in input order. */
export function embeddingList(model: string, vectors: Float64Array[], encoding: "float" | "base64", promptTokens: number): EmbeddingList {
  return {
    object: "list",
    data: vectors.map((v, index) => ({ object: "embedding", index, embedding: encoding === "base64" ? base64Floats(v) : Array.from(v) })),
    model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}
