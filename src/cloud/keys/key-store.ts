/**
 * API keys of cloud mode. A key is shown once, when created; the database keeps only its keyed
 * hash, HMAC-SHA256 with the server secret (`key-secret.ts`), which is kept outside the
 * database: a stolen database yields no key, and no guess can be checked against it offline. A
 * key is found by its hash (an indexed lookup) and the hashes are then compared in constant time.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { KeyLimits } from "../limits/limiter.js";
import type { CloudStore, KeyListing, KeyRecord } from "../store/store.js";

/** What a request's key allows (the shape the HTTP layer's key check takes). */
export interface ApiKeyInfo {
  /** Key id (`key_…`); null in local mode, where keys are not checked. */
  id: string | null;
  name: string;
  /** Model slugs the key may use; null means every model. */
  models: string[] | null;
  /** Its limits (cloud mode); absent in local mode. */
  limits?: KeyLimits;
  /** An admin key (cloud mode): it may also take the console's operator actions. */
  admin?: boolean;
}

export const KEY_PREFIX = "kiln-";

/** Characters of a key that `kiln keys list` shows (the prefix and 4 random ones: not enough to use it). */
const SHOWN_PREFIX_LENGTH = KEY_PREFIX.length + 4;

/** Default most milliseconds a verified key is trusted without asking the database again: 2 s, so a revocation reaches every replica within that. */
export const DEFAULT_KEY_CACHE_MS = 2_000;

export const NO_LIMITS: KeyLimits = { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null, dailyBudgetNanoUsd: null };

/** The keyed hash of a key, hex. */
export function hashKey(key: string, secret: Buffer): string {
  return createHmac("sha256", secret).update(key, "utf8").digest("hex");
}

/** Whether two hex hashes are equal, in time that does not depend on where they differ. */
export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, "hex");
  const y = Buffer.from(b, "hex");
  return x.length === y.length && x.length > 0 && timingSafeEqual(x, y);
}

/** What `create` takes besides the name. */
export interface KeyOptions {
  /** Model slugs it may use; null = every model. */
  models?: string[] | null;
  limits?: Partial<KeyLimits>;
  /** ISO 8601 time it stops working; null = never. */
  expiresAt?: string | null;
  /** An admin key (may promote and roll back from the console); default false. */
  admin?: boolean;
}

export interface KeyStoreOptions {
  /** Milliseconds a verified key is cached; default {@link DEFAULT_KEY_CACHE_MS}; 0 = ask the database every time. */
  cacheMs?: number;
  now?: () => number;
}

export class KeyStore {
  private readonly cache = new Map<string, { info: ApiKeyInfo | null; until: number; expiresAtMs: number | null }>();
  private readonly cacheMs: number;
  private readonly now: () => number;

  constructor(
    readonly store: CloudStore,
    private readonly secret: Buffer,
    options: KeyStoreOptions = {},
  ) {
    this.cacheMs = options.cacheMs ?? DEFAULT_KEY_CACHE_MS;
    this.now = options.now ?? Date.now;
  }

  /** Creates a key; returns it in clear (the only time it exists outside the client). */
  async create(name: string, options: KeyOptions = {}): Promise<{ key: string; record: KeyRecord }> {
    const key = KEY_PREFIX + randomBytes(24).toString("base64url");
    const record = await this.store.createKey({
      id: "key_" + randomBytes(6).toString("hex"),
      name,
      hash: hashKey(key, this.secret),
      prefix: key.slice(0, SHOWN_PREFIX_LENGTH),
      models: options.models ?? null,
      limits: { ...NO_LIMITS, ...options.limits },
      expiresAt: options.expiresAt ?? null,
      admin: options.admin ?? false,
    });
    return { key, record };
  }

  list(): Promise<KeyListing[]> {
    return this.store.listKeys(new Date(this.now()));
  }

  /** Revokes a key; false when there is no such key or it was already revoked. */
  async revoke(id: string): Promise<boolean> {
    const revoked = await this.store.revokeKey(id);
    // This process sees it at once; other replicas once their cache entry runs out.
    for (const [hash, entry] of this.cache) if (entry.info?.id === id) this.cache.delete(hash);
    return revoked;
  }

  /** The key's rights, or null when it is unknown, revoked or expired; rejects when the database cannot be reached. */
  async verify(key: string): Promise<ApiKeyInfo | null> {
    const hash = hashKey(key, this.secret);
    const now = this.now();
    const cached = this.cache.get(hash);
    if (cached && cached.until > now && (cached.expiresAtMs === null || cached.expiresAtMs > now)) return cached.info;
    const found = await this.store.keyByHash(hash);
    const usable = found !== null && sameHash(found.hash, hash) && found.revokedAt === null && (found.expiresAt === null || Date.parse(found.expiresAt) > now);
    const info = usable ? { id: found.id, name: found.name, models: found.models, limits: found.limits, admin: found.admin } : null;
    if (this.cacheMs > 0) {
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(hash, { info, until: now + this.cacheMs, expiresAtMs: found?.expiresAt ? Date.parse(found.expiresAt) : null });
    }
    return info;
  }
}
