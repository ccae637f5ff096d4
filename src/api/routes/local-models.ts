/**
 * Models served from local GGUF files (`kiln serve --model ./file.gguf`) as `/v1/models` shows
 * them: beside the catalogue, owned by `local-file`, with the file's path once served.
 */
import { hasModel } from "../../catalogue/catalogue.js";
import type { ModelEntry } from "../../catalogue/types.js";
import type { ModelState } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { modelObject, type ModelObject } from "../protocol/models.js";

/** The `owned_by` of a model served from a local file. */
export const LOCAL_FILE_OWNER = "local-file";

/** The registry's models that are not in the catalogue: those served from local files. */
export function localModelStates(ctx: ApiContext): ModelState[] {
  return ctx.models.all().filter((s) => !hasModel(s.slug));
}

/** A catalogue-shaped entry for a local model: what its artifact says of it, no price, no track. */
function localEntry(state: ModelState): ModelEntry {
  const text = state.status === "serving" && state.model.kind === "text" ? state.model : null;
  return {
    slug: state.slug,
    displayName: text?.localFile?.split("/").pop() ?? state.slug,
    kind: "text",
    family: "local",
    parameters: 0,
    architecture: "",
    contextLength: text?.nativeContextLength ?? 0,
    capabilities: [
      "chat",
      "completions",
      "json_schema",
      "streaming",
      ...(text ? (["tools"] as const) : []),
      ...(text?.reasoning ? (["reasoning"] as const) : []),
    ],
    prices: {},
    licence: "",
    upstream: LOCAL_FILE_OWNER,
    sources: [],
  };
}

export function localModelObject(ctx: ApiContext, state: ModelState): ModelObject {
  const artifactId = state.status === "serving" ? state.model.artifactId : undefined;
  const object = modelObject(
    localEntry(state),
    state,
    ctx.startedAt,
    ctx.metrics.throughput(state.slug, artifactId),
    state.status === "serving" ? "served" : undefined,
  );
  const path = state.status === "serving" && state.model.kind === "text" ? state.model.localFile : undefined;
  return { ...object, owned_by: LOCAL_FILE_OWNER, ...(path ? { local_path: path } : {}) };
}
