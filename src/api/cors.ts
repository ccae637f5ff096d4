/**
 * Cross-origin requests from browsers (CORS), off unless the operator names the origins allowed:
 * a page on another origin may then call the API (a preflight `OPTIONS` is answered with the
 * methods and headers allowed) and read its answers, streams included. Without it, or from an
 * origin not named, nothing is added and a preflight is the 404 of a route that does not exist.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";

/** `*` (any origin) or the exact origins (`https://app.example.com`) whose pages may call the API. */
export type AllowedOrigins = readonly string[];

/** The methods the API's routes answer. */
const METHODS = "GET, POST, DELETE, OPTIONS";
/** Headers a browser asks to send when a preflight lists none it needs beyond these. */
const DEFAULT_ALLOWED_HEADERS = "authorization, content-type, x-request-id";
/** The answer headers a page may read besides the plain ones (content-type…). */
const EXPOSED_HEADERS = [
  "x-request-id",
  "x-kiln-ignored-fields",
  "retry-after",
  "x-ratelimit-limit-requests",
  "x-ratelimit-remaining-requests",
  "x-ratelimit-reset-requests",
  "x-ratelimit-limit-tokens",
  "x-ratelimit-remaining-tokens",
  "x-ratelimit-reset-tokens",
].join(", ");
/** Seconds a browser may keep a preflight's answer. */
const PREFLIGHT_MAX_AGE_S = 600;

/** Why an `--allowed-origins` entry cannot be matched against a browser's `Origin` header, or undefined when it can. */
export function originProblem(origin: string): string | undefined {
  if (origin === "*") return undefined;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return `'${origin}' is not an origin (scheme://host[:port], e.g. https://app.example.com) or *`;
  }
  if (url.origin === "null" || url.origin !== origin)
    return `'${origin}' is not an origin: write it as ${url.origin === "null" ? "scheme://host[:port]" : url.origin}`;
  return undefined;
}

/** Adds the CORS answers for `allowed` to every route of `app` (nothing when the list is empty). */
export function allowCrossOrigin(app: FastifyInstance, allowed: AllowedOrigins): void {
  if (allowed.length === 0) return;
  const any = allowed.includes("*");
  const origins = new Set(allowed);
  app.addHook("onRequest", async (request: FastifyRequest, reply: FastifyReply) => {
    const origin = request.headers.origin;
    if (typeof origin !== "string" || !(any || origins.has(origin))) return;
    reply.header("access-control-allow-origin", any ? "*" : origin);
    // A cache in between must not hand one origin's answer to another.
    if (!any) reply.header("vary", "origin");
    const preflight = request.method === "OPTIONS" && request.headers["access-control-request-method"] !== undefined;
    if (!preflight) {
      reply.header("access-control-expose-headers", EXPOSED_HEADERS);
      return;
    }
    const asked = request.headers["access-control-request-headers"];
    reply
      .code(204)
      .header("access-control-allow-methods", METHODS)
      // The official clients send their own headers (x-stainless-…, openai-…): whatever a page asks to send is allowed.
      .header("access-control-allow-headers", typeof asked === "string" && asked.trim() !== "" ? asked : DEFAULT_ALLOWED_HEADERS)
      .header("access-control-max-age", String(PREFLIGHT_MAX_AGE_S));
    if (!any) reply.header("vary", "origin, access-control-request-method, access-control-request-headers");
    return reply.send();
  });
}
