/**
 * Ollama's model store routes on kiln's: POST /api/pull (a catalogue model's weights fetched into
 * $KILN_HOME, its progress as lines of JSON) and DELETE /api/delete (what is kept of a model,
 * deleted), as Open WebUI and Ollama's clients manage models. They change what the server keeps
 * for every client: any client may in local mode, as with Ollama; in cloud mode only an admin key.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { hasModel } from "../../catalogue/catalogue.js";
import { oneLine } from "../../catalogue/pull/errors.js";
import type { PullProgress } from "../../catalogue/pull/index.js";
import type { AuthMode } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { parseOrThrow } from "../protocol/issues.js";
import { ollamaDeleteRequestSchema, ollamaErrorBody, ollamaPullRequestSchema } from "../protocol/ollama.js";
import { streamSse } from "../sse.js";
import { modelSlugOf } from "./model-lookup.js";

/** Least milliseconds between two progress lines of one file (its first and last always go). */
const PROGRESS_EVERY_MS = 250;

export function ollamaModelRoutes(api: FastifyInstance, ctx: ApiContext, auth: AuthMode): void {
  api.post("/pull", async (request, reply) => {
    const body = parseOrThrow(ollamaPullRequestSchema, request.body);
    const slug = managedSlug(ctx, request, auth, body.model ?? body.name);
    const pulling = new AbortController();
    // A client that leaves stops the download; what came so far resumes at the next pull.
    reply.raw.once("close", () => reply.raw.writableFinished || pulling.abort());
    if (body.stream === false) {
      await pull(ctx, slug, pulling.signal, () => {});
      return { status: "success" };
    }
    await streamSse(
      reply,
      ctx.sse,
      async (sse) => {
        await sse.send({ status: "pulling manifest" });
        await pull(
          ctx,
          slug,
          pulling.signal,
          progressLines((line) => void sse.send(line)),
        );
        await sse.send({ status: "success" });
      },
      { lines: true, end: "last-event", failure: (error) => [ollamaErrorBody(error)] },
    );
  });

  api.delete("/delete", async (request, reply) => {
    const body = parseOrThrow(ollamaDeleteRequestSchema, request.body ?? {});
    const slug = managedSlug(ctx, request, auth, body.model ?? body.name);
    // A loaded model keeps serving until it is unloaded (`kiln rm` says the same).
    if (!ctx.models.remove(slug)) throw apiError("model_not_found", `model '${slug}' not found: nothing of it is kept on this server.`, "model");
    return reply.code(200).send();
  });
}

/** The catalogue slug a pull or delete names, checked: a 400 without one, 404 for one kiln does not know, 403 for a cloud key that is not an admin's. */
function managedSlug(ctx: ApiContext, request: FastifyRequest, auth: AuthMode, id: string | undefined): string {
  if (id === undefined) throw apiError("missing_required_parameter", "Missing required parameter: 'model'.", "model");
  if (auth.mode === "cloud" && request.apiKey?.admin !== true) {
    throw apiError("admin_key_required", "Pulling and deleting models take an admin key (`kiln keys create --admin`); this key is not one.");
  }
  const slug = modelSlugOf(ctx, id);
  if (!hasModel(slug)) throw apiError("model_not_found", `The model '${id}' is not in kiln's catalogue (\`kiln models\` lists it).`, "model");
  if (!ctx.models.pulls) throw apiError("invalid_request", "This server answers only the models it was started with: it pulls and deletes none.", "model");
  return slug;
}

async function pull(ctx: ApiContext, slug: string, signal: AbortSignal, onProgress: (p: PullProgress) => void): Promise<void> {
  try {
    await ctx.models.pull(slug, signal, onProgress);
  } catch (err) {
    if (signal.aborted) throw err;
    throw apiError("model_pull_failed", `pulling '${slug}' failed: ${oneLine(err)}`, "model");
  }
}

/** Pull progress as Ollama's lines: per file, `pulling <file>` with its bytes (`digest` names the file, as Ollama's clients key their bars by it), then verifying. */
export function progressLines(send: (line: Record<string, unknown>) => void): (p: PullProgress) => void {
  const sentAt = new Map<string, number>();
  return (p) => {
    const key = `${p.phase} ${p.file}`;
    const now = Date.now();
    const done = p.bytesTotal !== null && p.bytesDone >= p.bytesTotal;
    if (sentAt.has(key) && !done && now - sentAt.get(key)! < PROGRESS_EVERY_MS) return;
    sentAt.set(key, now);
    if (p.phase === "verify") send({ status: "verifying sha256 digest" });
    else if (p.phase === "extract") send({ status: `extracting ${p.file}` });
    else send({ status: `pulling ${p.file}`, digest: p.file, ...(p.bytesTotal !== null ? { total: p.bytesTotal } : {}), completed: p.bytesDone });
  };
}
