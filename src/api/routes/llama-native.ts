/**
 * POST /completion and /infill, llama.cpp server's own completion API (what llama.vim and
 * llama.vscode call for code completion): validate -> the prompt (text or token ids; for `/infill`
 * llama.cpp's fill-in-the-middle layout with files as context) -> the same engine and constraints as
 * `/v1/completions` -> llama.cpp's answer shape. Also its `/embedding(s)` and `GET /props`. Errors
 * come in llama.cpp's shape.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { checkConstraint, ConstraintError, type ConstraintSpec } from "../../runtime/constrain/index.js";
import type { ServedModel } from "../../scheduler/index.js";
import { authHook, type AuthMode } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError, toApiError } from "../errors.js";
import { ignoredFieldsHeader, type SharedFields } from "../protocol/common.js";
import { parseOrThrow } from "../protocol/issues.js";
import {
  infillRequestSchema,
  LLAMA_DEFAULTS,
  llamaNormalized,
  nativeEmbeddingInputs,
  nativeEmbeddingRequestSchema,
  NATIVE_FIELDS,
  nativeCompletionRequestSchema,
  nativeErrorBody,
  type NativeSampling,
} from "../protocol/llama-native.js";
import { answerPlan, checkPromptLength, completionBudget } from "./generation-request.js";
import { answerGeneration } from "./generation.js";
import { answerId } from "./ids.js";
import { nativeFormat } from "./llama-native-format.js";
import { lookupServedModel, onlyTextModel } from "./model-lookup.js";
import { embeddingModel, embeddingPrompts, runEmbeddings } from "./embedding-run.js";
import { CLIENT_CLOSED_STATUS } from "./request-life.js";
import { kilnVersion } from "../../catalogue/version.js";

type SamplingBody = NativeSampling;

export async function llamaNativeRoutes(app: FastifyInstance, ctx: ApiContext, auth: AuthMode): Promise<void> {
  await app.register(async (api) => {
    api.addHook("onRequest", authHook(auth));
    api.setErrorHandler((err: FastifyError, request, reply) => {
      const error = toApiError(err, request.id);
      if (error.status >= 500 && error.code === "internal_error") request.log.error({ err }, "request failed");
      else request.log.info({ code: error.code, status: error.status, param: error.param }, error.message);
      if (error.retryAfter !== undefined) reply.header("retry-after", String(error.retryAfter));
      return reply.code(error.status).send(nativeErrorBody(error));
    });

    // What llama.cpp's server says of itself, read by clients to size prompts and render chats.
    api.get("/props", async (request) => {
      const query = request.query as { model?: unknown };
      const model = await lookupServedModel(ctx, request, typeof query.model === "string" && query.model !== "" ? query.model : onlyTextModel(ctx));
      return serverProps(model);
    });

    // What each KV slot is doing, as llama.cpp's monitoring endpoint shows it.
    api.get("/slots", async (request) => {
      const query = request.query as { model?: unknown };
      const model = await lookupServedModel(ctx, request, typeof query.model === "string" && query.model !== "" ? query.model : onlyTextModel(ctx));
      return slotsOf(model);
    });

    // llama.cpp's own embeddings shape, beside /v1/embeddings: one entry per input, its vector in a list (of one, pooled).
    for (const url of ["/embedding", "/embeddings"]) {
      api.post(url, async (request, reply) => {
        const body = parseOrThrow(nativeEmbeddingRequestSchema, request.body);
        const param = body.content != null ? "content" : "input";
        const model = embeddingModel(await lookupServedModel(ctx, request, body.model ?? onlyTextModel(ctx)));
        const inputs = nativeEmbeddingInputs(body);
        if (inputs.some((i) => i.length === 0))
          throw apiError("invalid_value", `'${param}' holds an empty input: each needs at least one character or token id.`, param);
        const run = await runEmbeddings(ctx, request, reply, model, embeddingPrompts(model, inputs, param, { keep: "none" }));
        if (run.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
        return run.vectors.map((v, index) => ({ index, embedding: [llamaNormalized(v, body.embd_normalize ?? 2)] }));
      });
    }

    api.post("/completion", async (request, reply) => {
      const startedAt = performance.now();
      const body = parseOrThrow(nativeCompletionRequestSchema, request.body);
      nameIgnored(reply, body);
      const model = await lookupServedModel(ctx, request, body.model ?? onlyTextModel(ctx));
      let promptIds: number[];
      if (typeof body.prompt === "string") {
        checkPromptLength(model, body.prompt.length, "prompt");
        promptIds = model.textPrompt(body.prompt);
      } else {
        if (body.prompt.some((id) => id >= model.vocabSize))
          throw apiError("invalid_value", `Token ids in 'prompt' must be below the vocabulary size ${model.vocabSize}.`, "prompt");
        promptIds = body.prompt;
      }
      return answer(ctx, request, reply, model, promptIds, body, startedAt);
    });

    api.post("/infill", async (request, reply) => {
      const startedAt = performance.now();
      const body = parseOrThrow(infillRequestSchema, request.body);
      nameIgnored(reply, body);
      const model = await lookupServedModel(ctx, request, body.model ?? onlyTextModel(ctx));
      if (!model.fillsInMiddle) {
        throw apiError("unsupported_value", `Infill is not supported by the model '${model.slug}': its vocabulary has no fill-in-the-middle tokens.`, "model");
      }
      const extra = (body.input_extra ?? []).map((f) => ({ filename: f.filename ?? "tmp", text: f.text }));
      const chars =
        body.input_prefix.length + body.input_suffix.length + (body.prompt ?? "").length + extra.reduce((n, f) => n + f.text.length + f.filename.length, 0);
      checkPromptLength(model, chars, "input_prefix");
      const promptIds = model.repositoryInfillPrompt({ prefix: body.input_prefix, suffix: body.input_suffix, prompt: body.prompt ?? "", extra })!;
      return answer(ctx, request, reply, model, promptIds, body, startedAt);
    });
  });
}

/** Generates the answer of either route. */
function answer(
  ctx: ApiContext,
  request: FastifyRequest,
  reply: FastifyReply,
  model: ServedModel,
  promptIds: number[],
  body: SamplingBody,
  startedAt: number,
): Promise<unknown> {
  const predict = body.n_predict ?? -1;
  const maxTokens = completionBudget(model, promptIds.length, predict >= 0 ? predict : null, "prompt", undefined, "n_predict");
  const fields = samplingOf(body);
  const probs = body.n_probs ?? 0;
  const constraint = constraintOf(body);
  const plan = answerPlan(fields, {
    model,
    answerId: answerId("cmpl"),
    prompts: [{ promptIds, maxTokens }],
    topLogprobs: probs > 0 ? probs : null,
    ...(constraint ? { constraint } : {}),
    ...(body.t_max_predict_ms != null && body.t_max_predict_ms > 0 ? { lineTimeLimitMs: body.t_max_predict_ms } : {}),
    ...(body.n_indent != null && body.n_indent > 0 ? { minIndent: body.n_indent } : {}),
  });
  const format = nativeFormat(model, {
    startedAt,
    prompt: model.detokenize(promptIds),
    settings: settingsOf(fields, maxTokens, probs),
    probs,
    fields: body.response_fields?.length ? body.response_fields : null,
  });
  return answerGeneration(ctx, request, reply, plan, format);
}

/** llama.cpp's sampling fields as kiln's, with llama.cpp's defaults where they are left out. */
function samplingOf(body: SamplingBody): SharedFields {
  const topK = body.top_k ?? LLAMA_DEFAULTS.top_k;
  return {
    temperature: body.temperature ?? LLAMA_DEFAULTS.temperature,
    top_k: topK <= 0 ? -1 : topK,
    top_p: body.top_p ?? LLAMA_DEFAULTS.top_p,
    min_p: body.min_p ?? LLAMA_DEFAULTS.min_p,
    seed: body.seed === -1 ? undefined : body.seed,
    repetition_penalty: body.repeat_penalty,
    presence_penalty: body.presence_penalty,
    frequency_penalty: body.frequency_penalty,
    stop: body.stop,
    ignore_eos: body.ignore_eos,
    logit_bias: logitBiasOf(body.logit_bias),
    stream: body.stream === true,
    // The stream's last event carries the counts and timings, as a usage chunk would.
    stream_options: body.stream ? { include_usage: true } : undefined,
  };
}

/** `[[token, bias]]` or `{token: bias}`, false banning the token, as kiln's `{token: bias}` within ±100. */
function logitBiasOf(bias: SamplingBody["logit_bias"]): Record<string, number> | undefined {
  if (bias == null) return undefined;
  const entries: Array<[string | number, number | false]> = Array.isArray(bias) ? bias : Object.entries(bias);
  return Object.fromEntries(entries.map(([token, b]) => [String(token), b === false ? -100 : Math.max(-100, Math.min(100, b))]));
}

/** `grammar` (GBNF) or `json_schema`, checked: a 400 naming the field for one kiln cannot enforce, or for both. */
function constraintOf(body: SamplingBody): ConstraintSpec | undefined {
  const grammar = body.grammar ? body.grammar : undefined;
  if (grammar !== undefined && body.json_schema != null) throw apiError("invalid_value", "Send 'grammar' or 'json_schema', not both.", "json_schema");
  const [spec, param]: [ConstraintSpec | undefined, string] =
    grammar !== undefined
      ? [{ type: "grammar", grammar }, "grammar"]
      : body.json_schema != null
        ? [{ type: "json_schema", schema: JSON.stringify(body.json_schema) }, "json_schema"]
        : [undefined, ""];
  if (spec === undefined) return undefined;
  try {
    checkConstraint(spec);
  } catch (err) {
    if (!(err instanceof ConstraintError)) throw err;
    throw apiError("invalid_value", `Invalid '${param}': ${err.message}`, param);
  }
  return spec;
}

/** `generation_settings` of the answer: what was asked, after the defaults. */
function settingsOf(fields: SharedFields, maxTokens: number, probs: number): Record<string, unknown> {
  return {
    n_predict: maxTokens,
    seed: fields.seed ?? -1,
    temperature: fields.temperature,
    top_k: fields.top_k,
    top_p: fields.top_p,
    min_p: fields.min_p,
    repeat_penalty: fields.repetition_penalty ?? 1,
    presence_penalty: fields.presence_penalty ?? 0,
    frequency_penalty: fields.frequency_penalty ?? 0,
    stop: fields.stop ?? [],
    ignore_eos: fields.ignore_eos ?? false,
    n_probs: probs,
    stream: fields.stream,
  };
}

/**
 * llama.cpp's `/props` for one model: its context per sequence (`n_ctx`) and the generation
 * settings a request without fields gets, the slots (sequences generating at once), its chat
 * template and its vocabulary's BOS and EOS tokens.
 */
function serverProps(model: ServedModel): Record<string, unknown> {
  const fields = samplingOf({});
  const { bos, eos } = model.sequenceTokens ?? { bos: null, eos: null };
  return {
    default_generation_settings: { n_ctx: model.contextLength, params: settingsOf(fields, -1, 0) },
    total_slots: model.engine.stats.snapshot().slots,
    model_alias: model.slug,
    model_path: model.slug,
    modalities: { vision: false, audio: false },
    chat_template: model.chatTemplateSource ?? "",
    bos_token: bos !== null ? model.tokenText(bos) : "",
    eos_token: eos !== null ? model.tokenText(eos) : "",
    build_info: `kiln ${kilnVersion()}`,
  };
}

/**
 * The model's KV slots in llama.cpp's `/slots` shape: `id_task` is the holding sequence's id (-1 for
 * a free slot), `next_token.n_decoded` the tokens it generated and `n_remain` those it may still; the
 * prompt's text is not kept, so `prompt` is empty. kiln's own: `n_prompt_tokens` and `n_cached`
 * (positions in the slot's cache).
 */
function slotsOf(model: ServedModel): Array<Record<string, unknown>> {
  return model.engine.slotStates().map(({ slot, sequence: seq }) => ({
    id: slot,
    id_task: seq?.id ?? -1,
    n_ctx: model.contextLength,
    speculative: false,
    is_processing: seq !== null,
    params: { n_predict: seq?.maxTokens ?? -1 },
    prompt: "",
    next_token: {
      has_next_token: seq !== null,
      has_new_line: false,
      n_remain: seq ? seq.maxTokens - seq.generated : -1,
      n_decoded: seq?.generated ?? 0,
      stopping_word: "",
    },
    n_prompt_tokens: seq?.promptTokens ?? 0,
    n_cached: seq?.cached ?? 0,
  }));
}

function nameIgnored(reply: FastifyReply, body: Record<string, unknown>): void {
  const header = ignoredFieldsHeader(Object.keys(body).filter((k) => !NATIVE_FIELDS.has(k)));
  if (header !== undefined) reply.header("x-kiln-ignored-fields", header);
}
