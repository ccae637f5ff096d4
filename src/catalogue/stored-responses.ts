/**
 * Stored responses of the Responses API (`store: true`, its default): each response object as
 * answered, with the conversation items that fed it, so that a later request continues it by
 * `previous_response_id` and `GET /v1/responses/{id}` reads it back, within a bounded retention:
 * at most `maxCount` responses (the oldest go first) and none older than `maxAgeSeconds`. A response
 * belongs to the key that made it (null in local mode) and is found only with that key.
 * {@link ResponseStore} is what the API needs; here in the records database (tables `responses` and
 * `response_items`), and in cloud mode's Postgres for a fleet (`src/cloud`).
 */
import type { KilnDatabase } from "./db.js";

/** Default most stored responses: 10 000 (older ones are deleted as new ones are stored). */
export const DEFAULT_MAX_STORED_RESPONSES = 10_000;
/** Default days a stored response is kept: 30, as the reference API keeps them. */
export const DEFAULT_STORED_RESPONSE_DAYS = 30;

/** A conversation item (a message, a function call or its output) with its id. */
export interface StoredItem {
  id: string;
  type: string;
  [field: string]: unknown;
}

export interface StoredResponse {
  /** `resp_…`. */
  id: string;
  /** The key that made it; null in local mode. */
  keyId: string | null;
  /** Unix seconds. */
  createdAt: number;
  /** The response object as it was answered (its `output` items included). */
  response: Record<string, unknown> & { output: StoredItem[] };
  /** Every item the model saw before answering, oldest first: the previous responses' inputs and outputs, then this request's input. */
  input: StoredItem[];
}

export interface ResponseRetention {
  /** Most responses kept; the oldest are deleted first. 0 keeps none. Default {@link DEFAULT_MAX_STORED_RESPONSES}. */
  maxCount?: number;
  /** Seconds a response is kept. Default {@link DEFAULT_STORED_RESPONSE_DAYS} days. */
  maxAgeSeconds?: number;
}

interface ResponseRow {
  id: string;
  key_id: string | null;
  created_at: number;
  response_json: string;
  input_json: string;
}

/** Where the Responses API keeps stored responses. */
export interface ResponseStore {
  /** Stores a response (and indexes its items for `item_reference`s), then deletes what retention no longer allows. */
  save(stored: StoredResponse): Promise<void>;
  /** The response `id` as `keyId` may see it, or null (unknown, another key's, or past retention). */
  get(id: string, keyId: string | null): Promise<StoredResponse | null>;
  /** Deletes the response `id` of `keyId`; false when there is none it may see. */
  delete(id: string, keyId: string | null): Promise<boolean>;
  /** An input or output item of one of `keyId`'s stored responses, by its id (an `item_reference`), or null. */
  item(itemId: string, keyId: string | null): Promise<StoredItem | null>;
  /** Responses stored (retention applied as of the last save). */
  count(): Promise<number>;
}

/** The {@link ResponseStore} in kiln's SQLite records database. */
export class SqliteResponseStore implements ResponseStore {
  readonly maxCount: number;
  readonly maxAgeSeconds: number;

  /** @param now the clock, milliseconds (tests move it) */
  constructor(
    private readonly db: KilnDatabase,
    retention: ResponseRetention = {},
    private readonly now: () => number = Date.now,
  ) {
    this.maxCount = retention.maxCount ?? DEFAULT_MAX_STORED_RESPONSES;
    this.maxAgeSeconds = retention.maxAgeSeconds ?? DEFAULT_STORED_RESPONSE_DAYS * 86_400;
  }

  async save(stored: StoredResponse): Promise<void> {
    if (this.maxCount <= 0) return;
    const insertItem = this.db.prepare("INSERT OR IGNORE INTO response_items (item_id, response_id, item_json) VALUES (?, ?, ?)");
    this.db
      .transaction(() => {
        this.db
          .prepare("INSERT INTO responses (id, key_id, created_at, response_json, input_json) VALUES (?, ?, ?, ?, ?)")
          .run(stored.id, stored.keyId, stored.createdAt, JSON.stringify(stored.response), JSON.stringify(stored.input));
        for (const item of [...stored.input, ...stored.response.output]) insertItem.run(item.id, stored.id, JSON.stringify(item));
        this.prune();
      })
      .immediate();
  }

  async get(id: string, keyId: string | null): Promise<StoredResponse | null> {
    const row = this.db.prepare("SELECT * FROM responses WHERE id = ? AND key_id IS ? AND created_at >= ?").get(id, keyId, this.oldestKept()) as
      | ResponseRow
      | undefined;
    if (!row) return null;
    return {
      id: row.id,
      keyId: row.key_id,
      createdAt: row.created_at,
      response: JSON.parse(row.response_json) as StoredResponse["response"],
      input: JSON.parse(row.input_json) as StoredItem[],
    };
  }

  async delete(id: string, keyId: string | null): Promise<boolean> {
    return this.db.prepare("DELETE FROM responses WHERE id = ? AND key_id IS ? AND created_at >= ?").run(id, keyId, this.oldestKept()).changes > 0;
  }

  async item(itemId: string, keyId: string | null): Promise<StoredItem | null> {
    const row = this.db
      .prepare(
        `SELECT i.item_json FROM response_items i JOIN responses r ON r.id = i.response_id
         WHERE i.item_id = ? AND r.key_id IS ? AND r.created_at >= ? ORDER BY r.created_at DESC LIMIT 1`,
      )
      .get(itemId, keyId, this.oldestKept()) as { item_json: string } | undefined;
    return row ? (JSON.parse(row.item_json) as StoredItem) : null;
  }

  async count(): Promise<number> {
    return (this.db.prepare("SELECT count(*) AS n FROM responses").get() as { n: number }).n;
  }

  /** Unix seconds of the oldest creation time still kept. */
  private oldestKept(): number {
    return Math.floor(this.now() / 1000) - this.maxAgeSeconds;
  }

  private prune(): void {
    this.db.prepare("DELETE FROM responses WHERE created_at < ?").run(this.oldestKept());
    this.db
      .prepare("DELETE FROM responses WHERE rowid IN (SELECT rowid FROM responses ORDER BY created_at DESC, rowid DESC LIMIT -1 OFFSET ?)")
      .run(this.maxCount);
  }
}
