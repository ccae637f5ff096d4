/**
 * Bearer-key authentication for /v1 routes. Local mode: no key is checked; a request without an
 * `Authorization` header passes (as local servers do), while a header whose key is empty is still
 * a 401, so a client that meant to send a key learns it sent none. Local mode with shared keys
 * (`kiln serve --api-key`, as vLLM's and llama.cpp's): the request must carry one of them. Cloud mode: the key must be known, not revoked and not expired; its model list limits
 * which models it may use (403 otherwise). When the key database cannot be reached, cloud mode
 * fails closed: 503, never a request let through unchecked.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import { apiError } from "../errors.js";
import type { ApiKeyInfo, KeyVerifier } from "../cloud-port.js";

/**
 * How requests are authenticated. Local mode's `keys`: the shared keys a request must carry, one of
 * them (default none: any key or none passes).
 */
export type AuthMode = { mode: "local"; keys?: readonly string[] } | { mode: "cloud"; keys: KeyVerifier };

/** Whether answers need a key at all: cloud mode, or local mode with shared keys. */
export function checksKeys(auth: AuthMode): boolean {
  return auth.mode === "cloud" || (auth.keys?.length ?? 0) > 0;
}

/**
 * Keys the server issues to itself, to send a batch's requests through its own routes as the
 * batch's owner: random, never sent outside the process, revoked once the request is answered.
 */
export class InternalKeys {
  private readonly keys = new Map<string, ApiKeyInfo>();

  /** A fresh token that authenticates as `key`, running a batch (so its requests pay the batch price), until revoked. */
  issue(key: ApiKeyInfo): string {
    const token = `kiln-internal-${randomBytes(32).toString("hex")}`;
    this.keys.set(token, { ...key, batch: true });
    return token;
  }

  revoke(token: string): void {
    this.keys.delete(token);
  }

  lookup(token: string): ApiKeyInfo | null {
    return this.keys.get(token) ?? null;
  }
}

declare module "fastify" {
  interface FastifyRequest {
    /** The caller's key and what it allows (set by the auth hook on /v1 routes). */
    apiKey: ApiKeyInfo | null;
  }
}

const LOCAL_KEY: ApiKeyInfo = { id: null, name: "local", models: null };

/** The bearer token of a request, or null when there is none (an empty one included). */
export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const match = /^Bearer\s+(.*)$/i.exec(header.trim());
  const token = match?.[1]?.trim();
  return token ? token : null;
}

/**
 * An onRequest hook that authenticates or answers 401 (503 when cloud mode's key database is unreachable).
 * A token of `internal` authenticates as the key it was issued for.
 */
export function authHook(auth: AuthMode, internal?: InternalKeys) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const header = request.headers.authorization;
    // Anthropic's clients send their key as `x-api-key`: without an Authorization header, that is the key.
    const apiKey = request.headers["x-api-key"];
    if (!checksKeys(auth) && header === undefined) {
      request.apiKey = LOCAL_KEY;
      return;
    }
    const token = header === undefined && typeof apiKey === "string" ? apiKey.trim() || null : bearerToken(header);
    if (token === null) {
      throw apiError(
        "invalid_api_key",
        "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
      );
    }
    const issued = internal?.lookup(token);
    if (issued) {
      request.apiKey = issued;
      return;
    }
    if (auth.mode === "local") {
      if (auth.keys?.length && !auth.keys.some((key) => sameKey(key, token)))
        throw apiError("invalid_api_key", `Incorrect API key provided: ${redact(token)}.`);
      request.apiKey = LOCAL_KEY;
      return;
    }
    let info: ApiKeyInfo | null;
    try {
      info = await auth.keys.verify(token);
    } catch (err) {
      request.log.error({ err }, "auth: the key database cannot be reached; refusing requests until it can");
      throw apiError("auth_unavailable", "The server cannot check API keys right now (its key database is unreachable); retry in a moment.");
    }
    if (!info) throw apiError("invalid_api_key", `Incorrect API key provided: ${redact(token)}.`);
    request.apiKey = info;
  };
}

/** The id of the key that owns what a request stores or reads (responses, files, batches); null in local mode. */
export function ownerKeyId(request: FastifyRequest): string | null {
  return request.apiKey?.id ?? null;
}

/** Throws 403 when the request's key may not use `slug`. */
export function assertModelAllowed(request: FastifyRequest, slug: string): void {
  const models = request.apiKey?.models;
  if (models && !models.includes(slug)) {
    throw apiError("model_not_allowed", `This API key is not allowed to use the model '${slug}'.`, "model");
  }
}

/** Compares two keys in time that does not depend on where they differ (their digests have one length). */
function sameKey(a: string, b: string): boolean {
  const digest = (text: string) => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(a), digest(b));
}

function redact(token: string): string {
  return token.length <= 8 ? "****" : `${token.slice(0, 5)}****${token.slice(-4)}`;
}
