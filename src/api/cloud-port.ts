/**
 * What the HTTP layer needs from cloud mode, and nothing of how it is done: check a key, admit a
 * request under its key's limits (or say why not), give an admission back, record what a request
 * used. `src/cloud` implements it (its key store and meter fit these shapes; it does not import
 * api), and `kiln serve` wires the two. What is HTTP about it (the rate-limit headers, a refusal as
 * an API error) is api's: `cloud-gate.ts`.
 */

/** What one key may do; null = unlimited. */
export interface KeyLimits {
  requestsPerMinute: number | null;
  tokensPerMinute: number | null;
  maxConcurrent: number | null;
  /** Spend per UTC day, nano-USD. */
  dailyBudgetNanoUsd: number | null;
}

/** What a request's key allows. */
export interface ApiKeyInfo {
  /** Key id (`key_…`); null in local mode, where keys are not checked. */
  id: string | null;
  name: string;
  /** Model slugs the key may use; null means every model. */
  models: string[] | null;
  /** Its limits (cloud mode); absent in local mode. */
  limits?: KeyLimits;
  /** An admin key (cloud mode): the console's operator actions (promote, rollback) accept only such a key. Absent = not an admin key. */
  admin?: boolean;
  /** The key as the server runs a batch's requests with it (`api/auth`'s internal keys): they pay the batch price. Absent = a client's own request. */
  batch?: boolean;
}

/** Looks keys up (cloud mode). */
export interface KeyVerifier {
  /** The key's rights, or null when it is unknown, revoked or expired; rejects when the database cannot be reached. */
  verify(key: string): Promise<ApiKeyInfo | null>;
}

/** How a request ended, as its usage record says. */
export type SettledFrom = "completed" | "cancelled" | "shutdown" | "failed";

/** What one generation or transcription used. */
export interface UsageRecord {
  /** Unique id of the answer (the completion id), the record's key. */
  requestId: string;
  keyId: string | null;
  slug: string;
  /** The artifact that served it, where known. */
  artifactId?: string | null;
  promptTokens: number;
  completionTokens: number;
  /** Seconds of audio billed (transcription models); absent or 0 for text. */
  audioSeconds?: number;
  /** How the request ended; default "completed". */
  settledFrom?: SettledFrom;
}

export interface UsageRecorder {
  /** Records one request's usage. Called once the answer is generated; must not throw into the answer. */
  record(usage: UsageRecord): void;
  /**
   * Whether a new metered request may be served now: false while its usage could be neither
   * written nor kept durably (such requests get 503 `ledger_unavailable` before any work). Absent = always.
   */
  admits?(): boolean;
  /** Stops background work and makes a last attempt to write what is pending. */
  close?(): void | Promise<void>;
}

/** The values of the reference API's rate-limit headers; null where the key has no such limit. */
export interface RateLimitState {
  limitRequests: number | null;
  remainingRequests: number | null;
  /** Milliseconds until the request window has room for one more request. */
  resetRequestsMs: number | null;
  limitTokens: number | null;
  remainingTokens: number | null;
  /** Milliseconds until the token window is back to full. */
  resetTokensMs: number | null;
}

/** What a request asks to be admitted for. */
export interface AdmissionRequest {
  /** The answer's id: the ledger row's key and the limits' ticket. */
  requestId: string;
  slug: string;
  artifactId: string | null;
  promptTokens: number;
  /** The most completion tokens it may produce (all choices together). */
  maxCompletionTokens: number;
  /** Milliseconds of audio billed (transcriptions); 0 for text. */
  audioMs: number;
  /** What the model's prices are multiplied by for this request (a batch's requests pay the batch price); default 1. */
  priceFactor?: number;
}

/**
 * The answer to an admission. `state` is the key's limits as they stand (null: a request without
 * a cloud key, or the limits could not be read).
 */
export type AdmissionDecision =
  | { outcome: "admitted"; state: RateLimitState | null }
  | {
      outcome: "refused";
      state: RateLimitState;
      /** `rate_limit_exceeded` for requests, tokens and concurrency; `insufficient_quota` for the daily budget. */
      code: "rate_limit_exceeded" | "insufficient_quota";
      limit: "requests" | "tokens" | "concurrency" | "budget";
      /** When trying again can succeed, milliseconds. */
      retryAfterMs: number;
    }
  | {
      /** Fail closed: the limit counters (`limits`) or the database that holds the reservations (`ledger`) cannot be reached. */
      outcome: "unavailable";
      store: "limits" | "ledger";
      error: unknown;
      state: RateLimitState | null;
    };

/** Cloud mode's metering: admission under the key's limits, and the usage of what was admitted. */
export interface Metering extends UsageRecorder {
  /** Admits the request for its key (a key without limits: admitted, nothing reserved); never throws for a store that cannot be reached. */
  admit(key: ApiKeyInfo, what: AdmissionRequest): Promise<AdmissionDecision>;
  /** A request admitted but never run: its reservation and limits are given back, nothing charged. */
  release(requestId: string): Promise<void>;
  /** The key's limits as last seen on this replica (or full, when none was), for answers that did not pass admission. */
  lastKnownState(key: ApiKeyInfo): RateLimitState | null;
}
