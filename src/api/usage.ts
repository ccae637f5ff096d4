/** Metered usage: one row per generation request in the `usage` table (cloud mode). */
import type { KilnDatabase } from "../catalogue/db.js";
import type { ModelEntry } from "../catalogue/types.js";

export interface UsageRecord {
  /** Unique id of the answer (the completion id), the row key. */
  requestId: string;
  keyId: string | null;
  slug: string;
  promptTokens: number;
  completionTokens: number;
}

export interface UsageRecorder {
  record(usage: UsageRecord): void;
}

/** Cost in USD of a text request at the catalogue's prices. */
export function costUsd(entry: ModelEntry | undefined, promptTokens: number, completionTokens: number): number {
  if (!entry) return 0;
  const p = entry.prices;
  return (promptTokens * (p.inputUsdPerMillionTokens ?? 0) + completionTokens * (p.outputUsdPerMillionTokens ?? 0)) / 1e6;
}

export function sqliteUsageRecorder(db: KilnDatabase, priceOf: (slug: string) => ModelEntry | undefined): UsageRecorder {
  const insert = db.prepare(
    `INSERT OR IGNORE INTO usage (request_id, key_id, slug, prompt_tokens, completion_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?)`,
  );
  return {
    record(u) {
      insert.run(u.requestId, u.keyId, u.slug, u.promptTokens, u.completionTokens, costUsd(priceOf(u.slug), u.promptTokens, u.completionTokens));
    },
  };
}
