/** From a request's `model` field to a model in service, or the right error (404, 403, 503). */
import type { FastifyRequest } from "fastify";
import { hasModel } from "../../catalogue/catalogue.js";
import type { ServedModel } from "../../scheduler/index.js";
import { assertModelAllowed } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";

export function lookupServedModel(ctx: ApiContext, request: FastifyRequest, slug: string): ServedModel {
  const state = ctx.models.get(slug);
  if (!state && !hasModel(slug)) {
    throw apiError("model_not_found", `The model '${slug}' does not exist (GET /v1/models lists them).`, "model");
  }
  assertModelAllowed(request, slug);
  switch (state?.status) {
    case "serving":
      return state.model;
    case "loading":
      throw apiError("model_loading", `The model '${slug}' is still loading (${state.stage}); retry shortly.`, "model");
    case "failed":
      throw apiError("model_unavailable", `The model '${slug}' failed to load on this server: ${state.error}`, "model");
    default:
      throw apiError("model_not_found", `The model '${slug}' is not served here: start the server with \`kiln serve --model ${slug}\`.`, "model");
  }
}
