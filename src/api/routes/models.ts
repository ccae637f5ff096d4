/** GET /v1/models and GET /v1/models/{id}: the whole catalogue, with what this server serves. */
import type { FastifyInstance } from "fastify";
import { listModels } from "../../catalogue/catalogue.js";
import type { ModelEntry } from "../../catalogue/types.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { modelList, modelObject, type ModelList, type ModelObject } from "../protocol/models.js";
import { localModelObject, localModelStates } from "./local-models.js";
import { modelSlugOf } from "./model-lookup.js";

export function modelsRoute(app: FastifyInstance, ctx: ApiContext): void {
  const describe = (entry: ModelEntry): ModelObject => {
    const state = ctx.models.get(entry.slug);
    // Measured on the artifact in service: after a live switch, the one before no longer counts.
    const artifactId = state?.status === "serving" ? state.model.artifactId : undefined;
    return modelObject(entry, state, ctx.startedAt, ctx.metrics.throughput(entry.slug, artifactId), ctx.models.availability(entry.slug));
  };

  app.get("/models", async (): Promise<ModelList> => modelList([...listModels().map(describe), ...localModelStates(ctx).map((s) => localModelObject(ctx, s))]));

  // A wildcard, so that ids holding "/" (raw or percent-encoded) reach this route and get a model answer.
  app.get("/models/*", async (request): Promise<ModelObject> => {
    const raw = (request.params as { "*": string })["*"];
    const id = safeDecode(raw);
    const slug = modelSlugOf(ctx, id);
    const entry = listModels().find((m) => m.slug === slug);
    const local = entry ? undefined : localModelStates(ctx).find((s) => s.slug === slug);
    if (local) return localModelObject(ctx, local);
    if (!entry) throw apiError("model_not_found", `The model '${id}' does not exist.`, "model");
    return describe(entry);
  });
}

/** Percent-decodes what the router left encoded (it keeps %2F in wildcards); bad escapes stay as they are. */
function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
