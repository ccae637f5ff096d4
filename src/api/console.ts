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
import type { FastifyInstance, FastifyReply } from "fastify";
import { hasModel } from "../catalogue/catalogue.js";
import { authHook, type AuthMode } from "./auth/auth.js";
import { apiError } from "./errors.js";

/** The console's sources: `console/` at the package's root, beside `src/`. */
export const CONSOLE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../console");

/** What the track pages need of the track's records. */
export interface TrackRecords {
  /** A model's track as `kiln tracks <slug> --json` prints it, plus its trend by run. */
  history(slug: string): Record<string, unknown>;
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

export function consoleRoutes(app: FastifyInstance, auth: AuthMode, tracks: TrackRecords | undefined): void {
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

  app.register(async (api) => {
    api.addHook("onRequest", authHook(auth));
    api.get("/console/api/tracks/:slug", async (request) => {
      const { slug } = request.params as { slug: string };
      if (!hasModel(slug)) throw apiError("model_not_found", `The model '${slug}' does not exist.`, "model");
      if (!tracks) throw apiError("route_not_found", "This server keeps no track records.");
      return tracks.history(slug);
    });
  });
}
