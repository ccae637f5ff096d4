/**
 * Ollama's native API under `/api`, for the clients and tools that speak only it: `/api/chat`,
 * `/api/generate`, `/api/embed`, `/api/embeddings`, `/api/tags`, `/api/ps`, `/api/show` and
 * `/api/version`, on the same models, engine and limits as `/v1`, and `/api/pull` and `/api/delete`
 * on kiln's model store. Errors come in Ollama's shape, `{"error": "<message>"}`, with the same
 * statuses as on `/v1`. The routes of Ollama's own registry and blobs (push, create, copy, blobs)
 * are a 501 naming what kiln does instead.
 */
import type { FastifyError, FastifyInstance } from "fastify";
import { listModels } from "../../catalogue/catalogue.js";
import type { ModelEntry, WeightSource } from "../../catalogue/types.js";
import { kilnVersion } from "../../catalogue/version.js";
import { assertModelAllowed, authHook, type AuthMode } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError, toApiError } from "../errors.js";
import { ollamaErrorBody, ollamaShowRequestSchema } from "../protocol/ollama.js";
import { parseOrThrow } from "../protocol/issues.js";
import { ollamaChatRoute, ollamaGenerateRoute } from "./ollama-generation.js";
import { ollamaEmbedRoutes } from "./ollama-embed.js";
import { ollamaModelRoutes } from "./ollama-models.js";
import { localModelStates } from "./local-models.js";
import { modelSlugOf } from "./model-lookup.js";

/** Ollama's routes kiln does not have, and what to do instead. */
const NOT_IMPLEMENTED: Array<[method: "GET" | "POST" | "DELETE" | "HEAD", path: string, instead: string]> = [
  ["POST", "/push", "kiln has no model registry to push to"],
  ["POST", "/create", "serve a GGUF file with `kiln serve --model ./file.gguf`"],
  ["POST", "/copy", "kiln's models are named by their slugs"],
  ["HEAD", "/blobs/:digest", "kiln has no blob store"],
  ["POST", "/blobs/:digest", "kiln has no blob store"],
];

export async function ollamaRoutes(app: FastifyInstance, ctx: ApiContext, auth: AuthMode): Promise<void> {
  await app.register(
    async (api) => {
      api.addHook("onRequest", authHook(auth));
      api.setErrorHandler((err: FastifyError, request, reply) => {
        const error = toApiError(err, request.id);
        if (error.status >= 500 && error.code === "internal_error") request.log.error({ err }, "request failed");
        else request.log.info({ code: error.code, status: error.status, param: error.param }, error.message);
        if (error.retryAfter !== undefined) reply.header("retry-after", String(error.retryAfter));
        return reply.code(error.status).send(ollamaErrorBody(error));
      });
      api.setNotFoundHandler((request, reply) => {
        const error = apiError("route_not_found", `Unknown request URL: ${request.method} ${request.url.split("?")[0]}.`);
        return reply.code(error.status).send(ollamaErrorBody(error));
      });

      api.get("/version", async () => ({ version: kilnVersion() }));
      api.get("/tags", async () => ({ models: localModels(ctx).map((m) => ({ ...m.listing, modified_at: m.modifiedAt })) }));
      api.get("/ps", async () => ({
        models: localModels(ctx)
          .filter((m) => m.served)
          .map((m) => ({ ...m.listing, expires_at: expiresAt(ctx, m.listing.model), size_vram: 0, context_length: m.contextLength })),
      }));
      // Described from the catalogue and, once loaded, the model itself: showing a model does not load it.
      api.post("/show", async (request) => {
        const body = parseOrThrow(ollamaShowRequestSchema, request.body);
        const id = body.model ?? body.name;
        if (id === undefined) throw apiError("missing_required_parameter", "Missing required parameter: 'model'.", "model");
        const slug = modelSlugOf(ctx, id);
        const entry = listModels().find((m) => m.slug === slug && m.kind === "text");
        const state = ctx.models.get(slug);
        const served = state?.status === "serving" && state.model.kind === "text" ? state.model : undefined;
        if (!entry && !served) throw apiError("model_not_found", `The model '${id}' does not exist (GET /api/tags lists the ones here).`, "model");
        assertModelAllowed(request, slug);
        const reasons = served ? served.reasoning !== null : (entry?.capabilities.includes("reasoning") ?? false);
        return {
          modelfile: "",
          parameters: "",
          template: "",
          details: details(entry),
          model_info: {
            "general.architecture": entry?.architecture ?? "",
            "general.parameter_count": entry?.parameters ?? 0,
            [`${entry?.architecture || "general"}.context_length`]: served?.contextLength ?? entry!.contextLength,
          },
          capabilities: [
            "completion",
            ...((served ? served.hasChatTemplate : entry!.capabilities.includes("tools")) ? ["tools"] : []),
            ...(served?.fillsInMiddle ? ["insert"] : []),
            ...(reasons ? ["thinking"] : []),
          ],
          modified_at: new Date(served ? served.artifactCreatedAt : ctx.startedAt * 1000).toISOString(),
        };
      });
      ollamaChatRoute(api, ctx);
      ollamaGenerateRoute(api, ctx);
      ollamaEmbedRoutes(api, ctx);
      ollamaModelRoutes(api, ctx, auth);
      for (const [method, path, instead] of NOT_IMPLEMENTED) {
        api.route({
          method,
          url: path,
          handler: async (_request, reply) =>
            reply.code(501).send({ error: `kiln does not implement Ollama's ${method} /api${path.replace("/:digest", "/…")}: ${instead}.` }),
        });
      }
    },
    { prefix: "/api" },
  );
}

/** A text model this server has, as `/api/tags` lists it. */
interface LocalModel {
  listing: { name: string; model: string; size: number; digest: string; details: ReturnType<typeof details> };
  modifiedAt: string;
  served: boolean;
  contextLength: number;
}

/** The text models this server can answer with: served, or pulled and loadable on the first request. */
function localModels(ctx: ApiContext): LocalModel[] {
  const out: LocalModel[] = [];
  for (const entry of listModels()) {
    if (entry.kind !== "text") continue;
    const availability = ctx.models.availability(entry.slug);
    if (availability !== "served" && availability !== "loadable") continue;
    const state = ctx.models.get(entry.slug);
    const served = state?.status === "serving" && state.model.kind === "text" ? state.model : undefined;
    const file = mainFile(entry.sources);
    out.push({
      listing: { name: entry.slug, model: entry.slug, size: file?.bytes ?? 0, digest: file?.sha256 ?? "", details: details(entry) },
      modifiedAt: new Date(served ? served.artifactCreatedAt : ctx.startedAt * 1000).toISOString(),
      served: served !== undefined,
      contextLength: served?.contextLength ?? entry.contextLength,
    });
  }
  for (const state of localModelStates(ctx)) {
    if (state.status !== "serving" || state.model.kind !== "text") continue;
    out.push({
      listing: { name: state.slug, model: state.slug, size: 0, digest: "", details: details(undefined) },
      modifiedAt: new Date(state.model.artifactCreatedAt).toISOString(),
      served: true,
      contextLength: state.model.contextLength,
    });
  }
  return out;
}

/** The weights file a model is pulled as: its first source's first file (a split model's first shard). */
function mainFile(sources: readonly WeightSource[]): { path: string; bytes?: number; sha256?: string } | undefined {
  const source = sources[0];
  if (!source) return undefined;
  return source.type === "hub" ? source.files[0] : { path: source.member ?? source.path ?? "", bytes: source.bytes, sha256: source.sha256 };
}

/** Ollama's `details` of a model: its format, family, size and quantization, from the catalogue (empty for a local file). */
function details(entry: ModelEntry | undefined) {
  const family = entry?.architecture ?? "";
  return {
    parent_model: "",
    format: "gguf",
    family,
    families: family ? [family] : null,
    parameter_size: entry ? parameterSize(entry.parameters) : "",
    quantization_level: quantizationOf(entry ? (mainFile(entry.sources)?.path ?? "") : ""),
  };
}

/** "135M", "1.2B", "70.6B", as Ollama writes sizes. */
function parameterSize(parameters: number): string {
  if (parameters >= 1e9) return `${Number((parameters / 1e9).toFixed(1))}B`;
  return `${Math.round(parameters / 1e6)}M`;
}

/** The quantization a GGUF file's name states (`…Q4_K_M.gguf` -> "Q4_K_M"), or "". */
function quantizationOf(path: string): string {
  return /(I?Q[0-9](?:_[A-Z0-9]+)*|BF16|F16|F32)(?=(?:-[0-9]{5}-of-[0-9]{5})?\.gguf$)/i.exec(path)?.[1]?.toUpperCase() ?? "";
}

/** When a model loaded on demand will be unloaded without further requests (RFC 3339); null for one kiln keeps while it serves. */
function expiresAt(ctx: ApiContext, slug: string): string | null {
  const at = ctx.models.expiresAt(slug);
  return at === null ? null : new Date(at).toISOString();
}
