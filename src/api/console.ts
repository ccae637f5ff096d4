/**
 * The web console at `/`: one HTML page, its script and its stylesheet, bundled by esbuild from the
 * packed `console/` sources on the first request and kept in memory, so an installed kiln serves
 * it without a build step and nothing is loaded from another host. Its track pages read
 * `GET /console/api/tracks/:slug`, answered through {@link TrackRecords}, a port `kiln serve` fills
 * with what `kiln tracks --json` reads (api does not import track).
 */
import { readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { hasModel } from "../catalogue/catalogue.js";
import { authHook, type AuthMode } from "./auth/auth.js";
import { apiError } from "./errors.js";

/** The console's sources: `console/` at the package's root, beside `src/`. */
export const CONSOLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../console");

/** What the track pages need of the track's records, and the operator's actions on them. */
export interface TrackRecords {
  /** A model's track as `kiln tracks <slug> --json` prints it, plus its trend by run. */
  history(slug: string): Record<string, unknown>;
  /** As `kiln promote <slug> <artifact>`: says what serves now; throws with the reason it cannot. */
  promote?(slug: string, artifact: string): string;
  /** As `kiln rollback <slug>`: says what serves now; null when nothing was promoted. */
  rollback?(slug: string): string | null;
}

/** One key's usage on one UTC day with one model, as the ledger totals it (cloud mode). */
export interface UsageDay {
  day: string;
  model: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  audioMs: number;
  /** Integer nano-USD, as a decimal string (exact). */
  costNanoUsd: string;
}

/** What the usage page needs of cloud mode's ledger: one key's usage since a time, by day and model. */
export interface UsageReport {
  usage(keyId: string, since: string): Promise<UsageDay[]>;
}

export interface ConsoleBundle {
  html: string;
  js: string;
  css: string;
}

/**
 * Bundles the console: `console/main.js` and every module and stylesheet it imports (uPlot from
 * node_modules), minified. esbuild is imported here only, so a server that never serves the
 * console never loads it.
 */
export async function bundleConsole(): Promise<ConsoleBundle> {
  const { build } = await import("esbuild");
  const result = await build({
    entryPoints: [join(CONSOLE_DIR, "main.js")],
    bundle: true,
    write: false,
    minify: true,
    format: "esm",
    target: "es2020",
    outdir: "out",
    logLevel: "silent",
  });
  const text = (ext: string) => result.outputFiles.find((f) => f.path.endsWith(ext))?.text ?? "";
  return { html: await readFile(join(CONSOLE_DIR, "index.html"), "utf8"), js: text(".js"), css: text(".css") };
}

/** Only this origin's script, styles and API; audio and images from the page's own blobs. */
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'";

/** Days of usage the usage page shows. */
export const USAGE_DAYS = 30;

export function consoleRoutes(app: FastifyInstance, auth: AuthMode, tracks: TrackRecords | undefined, usage?: UsageReport): void {
  let bundle: Promise<ConsoleBundle> | undefined;
  const load = () => {
    bundle ??= bundleConsole().catch((err: unknown) => {
      // A failed build is tried again on the next request (a source being edited, say).
      bundle = undefined;
      throw apiError("internal_error", `The console could not be built: ${(err as Error).message}`);
    });
    return bundle;
  };
  const send = (reply: FastifyReply, type: string, body: string) =>
    reply.header("content-type", type).header("cache-control", "no-cache").header("content-security-policy", CSP).send(body);

  // The page and its assets need no key: in cloud mode the page asks for one and sends it with its API calls.
  app.get("/", async (_request, reply) => send(reply, "text/html; charset=utf-8", (await load()).html));
  app.get("/console/app.js", async (_request, reply) => send(reply, "text/javascript; charset=utf-8", (await load()).js));
  app.get("/console/app.css", async (_request, reply) => send(reply, "text/css; charset=utf-8", (await load()).css));

  // Promoting and rolling back change what serves every client. `kiln serve` offers them where it
  // knows who is at the console: on a loopback address (local mode: whoever reaches it is on this
  // machine) or in cloud mode, where they then take an admin key (most keys are clients' keys).
  const offered = tracks?.promote !== undefined && tracks.rollback !== undefined;
  const operatorOf = (request: FastifyRequest) => offered && (auth.mode === "local" || request.apiKey?.admin === true);
  const assertOperator = (request: FastifyRequest) => {
    if (!operatorOf(request))
      throw apiError("admin_key_required", "Promoting and rolling back take an admin key (`kiln keys create --admin`); this key is not one.");
  };

  app.register(async (api) => {
    api.addHook("onRequest", authHook(auth));
    // What the console shows depends on the mode; in cloud mode this is also where it learns that it needs a key (401).
    // `operator`: whether this session may promote and roll back (where the server offers them), so the console shows the buttons.
    api.get("/console/api/session", async (request) => ({
      mode: auth.mode,
      key: request.apiKey?.id ? { id: request.apiKey.id, name: request.apiKey.name, admin: request.apiKey.admin === true } : null,
      usage: auth.mode === "cloud" && usage !== undefined,
      operator: operatorOf(request),
    }));
    // The request's own key's usage only: a key sees no other key's.
    api.get("/console/api/usage", async (request) => {
      const keyId = request.apiKey?.id;
      if (auth.mode !== "cloud" || !usage || !keyId) throw apiError("route_not_found", "Usage is recorded in cloud mode only.");
      const since = new Date(Date.now() - USAGE_DAYS * 86_400_000).toISOString().slice(0, 10);
      return { key: keyId, since, days: await usage.usage(keyId, since) };
    });
    const slugOf = (params: unknown) => {
      const { slug } = params as { slug: string };
      if (!hasModel(slug)) throw apiError("model_not_found", `The model '${slug}' does not exist.`, "model");
      if (!tracks) throw apiError("route_not_found", "This server keeps no track records.");
      return slug;
    };
    api.get("/console/api/tracks/:slug", async (request) => {
      const slug = slugOf(request.params);
      return { ...tracks!.history(slug), operator: operatorOf(request) };
    });
    if (!offered) return;
    api.post("/console/api/tracks/:slug/promote", async (request) => {
      const slug = slugOf(request.params);
      sameOrigin(request);
      assertOperator(request);
      const artifact = (request.body as { artifact?: unknown } | undefined)?.artifact;
      if (typeof artifact !== "string" || artifact === "")
        throw apiError("missing_required_parameter", 'Name the artifact to promote: {"artifact": "<id>"}.', "artifact");
      try {
        return { message: tracks!.promote!(slug, artifact) };
      } catch (err) {
        throw apiError("invalid_request", (err as Error).message, "artifact");
      }
    });
    api.post("/console/api/tracks/:slug/rollback", async (request) => {
      const slug = slugOf(request.params);
      sameOrigin(request);
      assertOperator(request);
      const message = tracks!.rollback!(slug);
      if (message === null) throw apiError("invalid_request", `${slug} has no promoted artifact (the default compile serves).`);
      return { message };
    });
  });
}

/**
 * An operator action must come from the console itself: a JSON body (another site's page cannot
 * send one without a CORS preflight, which kiln answers only for --allowed-origins) and, when the
 * browser names an origin, this server's.
 */
function sameOrigin(request: FastifyRequest): void {
  if (!String(request.headers["content-type"] ?? "").startsWith("application/json"))
    throw apiError("invalid_request", "Send the action as JSON (content-type: application/json).");
  const origin = request.headers.origin;
  if (origin !== undefined && origin !== "null") {
    let host: string;
    try {
      host = new URL(origin).host;
    } catch {
      host = "";
    }
    if (host !== request.headers.host) throw apiError("invalid_request", `Operator actions are taken from this server's own console, not from ${origin}.`);
  }
}
