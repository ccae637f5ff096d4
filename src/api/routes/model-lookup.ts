/**
 * From a request's `model` field to a model in service of the kind the route needs, loaded on
 * demand where the server may, or the right error (404, 403, 400, 503).
 */
import type { FastifyRequest } from "fastify";
import { resolveModelId } from "../../catalogue/aliases.js";
import { getModel, hasModel } from "../../catalogue/catalogue.js";
import type { AnyServedModel, ServedModel, ServedSpeechModel } from "../../scheduler/index.js";
import { assertModelAllowed } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";

/** What a route works with: text generation (chat, completions) or transcription. */
export type ModelKind = AnyServedModel["kind"];

type ModelOfKind<K extends ModelKind> = K extends "text" ? ServedModel : ServedSpeechModel;

/**
 * The slug a request's `model` names: a slug, or a common spelling of one (the source repository
 * id, a dotted version, an Ollama-style tag); the answer's `model` is the slug either way.
 */
export function modelSlugOf(ctx: ApiContext, id: string): string {
  return ctx.models.get(id) || hasModel(id) ? id : (resolveModelId(id) ?? id);
}

/**
 * The one text model served, for a request without `model` on routes of servers that serve one
 * (llama.cpp's); a 400 asking for `model` when there are several or none.
 */
export function onlyTextModel(ctx: ApiContext): string {
  const served = ctx.models.servingText();
  if (served.length === 1) return served[0].slug;
  throw apiError("missing_required_parameter", `Missing required parameter: 'model' (this server serves ${served.length} text models).`, "model");
}

/** The slug of a model this server knows (served or in the catalogue) that the request's key may use; else a 404 or 403. */
export function knownModelSlug(ctx: ApiContext, request: FastifyRequest, id: string): string {
  const slug = modelSlugOf(ctx, id);
  if (!ctx.models.get(slug) && !hasModel(slug)) {
    throw apiError("model_not_found", `The model '${id}' does not exist (GET /v1/models lists them).`, "model");
  }
  assertModelAllowed(request, slug);
  return slug;
}

export function lookupServedModel(ctx: ApiContext, request: FastifyRequest, id: string): Promise<ServedModel>;
export function lookupServedModel<K extends ModelKind>(ctx: ApiContext, request: FastifyRequest, id: string, kind: K): Promise<ModelOfKind<K>>;
export async function lookupServedModel(ctx: ApiContext, request: FastifyRequest, id: string, kind: ModelKind = "text"): Promise<AnyServedModel> {
  const slug = knownModelSlug(ctx, request, id);
  const known = ctx.models.get(slug);
  // Checked before the serving state: naming a model of the wrong kind is the client's mistake
  // whether or not this server serves it (and loads nothing for it).
  assertKind(slug, known?.status === "serving" ? known.model.kind : catalogueKind(slug), kind);
  const state = await ctx.models.demand(slug);
  switch (state?.status) {
    case "serving":
      holdForRequest(request, ctx.models.hold(state.model));
      return state.model;
    case "loading":
      throw apiError("model_loading", `The model '${slug}' is still loading (${state.stage}); retry shortly.`, "model");
    case "failed":
      throw apiError("model_unavailable", `The model '${slug}' failed to load on this server: ${state.error}`, "model");
    case "not_pulled":
      throw apiError(
        "model_not_pulled",
        `The model '${slug}' is not pulled on this server: run \`kiln pull ${slug}\` where it runs (or start it with --pull-on-demand).`,
        "model",
      );
    default:
      throw apiError("model_not_found", `The model '${slug}' is not served here: start the server with \`kiln serve --model ${slug}\`.`, "model");
  }
}

/** Each request's holds on the models it found, released when its answer is over (`releaseModelHolds`, from the app's hooks). */
const HOLDS = new WeakMap<FastifyRequest, Array<() => void>>();

function holdForRequest(request: FastifyRequest, release: () => void): void {
  HOLDS.set(request, [...(HOLDS.get(request) ?? []), release]);
}

/** Releases the request's holds on its models: its answer is complete, or its client has gone. */
export function releaseModelHolds(request: FastifyRequest): void {
  for (const release of HOLDS.get(request) ?? []) release();
  HOLDS.delete(request);
}

function catalogueKind(slug: string): ModelKind | undefined {
  return hasModel(slug) ? getModel(slug).kind : undefined;
}

/** A 400 naming the route that takes a model of kind `actual`, when the route needs `wanted`. */
function assertKind(slug: string, actual: ModelKind | undefined, wanted: ModelKind): void {
  if (actual === undefined || actual === wanted) return;
  if (actual === "transcription") {
    throw apiError("invalid_value", `The model '${slug}' is a transcription model: use /v1/audio/transcriptions with it.`, "model");
  }
  throw apiError(
    "invalid_value",
    `The model '${slug}' is a text generation model, not a transcription model: use /v1/chat/completions or /v1/completions with it, and a transcription model (e.g. whisper-large-v3-turbo) here.`,
    "model",
  );
}
