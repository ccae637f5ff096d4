/**
 * Stored responses of the Responses API in cloud mode's Postgres, shared by every replica of a
 * fleet: `previous_response_id`, `item_reference`s and GET /v1/responses/{id} find a response
 * whichever replica answered it. The same retention as the SQLite store: at most `maxCount`
 * responses, none older than `maxAgeSeconds`.
 */
import type pg from "pg";
import {
  DEFAULT_MAX_STORED_RESPONSES,
  DEFAULT_STORED_RESPONSE_DAYS,
  type ResponseRetention,
  type ResponseStore,
  type StoredItem,
  type StoredResponse,
} from "../../catalogue/stored-responses.js";
import { inTransaction } from "./postgres-transaction.js";

interface PgResponseRow {
  id: string;
  key_id: string | null;
  created_at: string;
  response_json: string;
  input_json: string;
}

export class PostgresResponseStore implements ResponseStore {
  readonly maxCount: number;
  readonly maxAgeSeconds: number;

  /** @param now the clock, milliseconds */
  constructor(
    private readonly pool: pg.Pool,
    retention: ResponseRetention = {},
    private readonly now: () => number = Date.now,
  ) {
    this.maxCount = retention.maxCount ?? DEFAULT_MAX_STORED_RESPONSES;
    this.maxAgeSeconds = retention.maxAgeSeconds ?? DEFAULT_STORED_RESPONSE_DAYS * 86_400;
  }

  async save(stored: StoredResponse): Promise<void> {
    if (this.maxCount <= 0) return;
    await inTransaction(this.pool, async (client) => {
      await client.query("INSERT INTO responses (id, key_id, created_at, response_json, input_json) VALUES ($1, $2, $3, $4, $5)", [
        stored.id,
        stored.keyId,
        stored.createdAt,
        JSON.stringify(stored.response),
        JSON.stringify(stored.input),
      ]);
      const items = [...stored.input, ...stored.response.output];
      if (items.length > 0) {
        await client.query(
          `INSERT INTO response_items (item_id, response_id, item_json)
           SELECT item_id, $1, item_json FROM unnest($2::text[], $3::text[]) AS t (item_id, item_json) ON CONFLICT DO NOTHING`,
          [stored.id, items.map((i) => i.id), items.map((i) => JSON.stringify(i))],
        );
      }
      await client.query("DELETE FROM responses WHERE created_at < $1", [this.oldestKept()]);
      await client.query("DELETE FROM responses WHERE seq IN (SELECT seq FROM responses ORDER BY created_at DESC, seq DESC OFFSET $1)", [this.maxCount]);
    });
  }

  async get(id: string, keyId: string | null): Promise<StoredResponse | null> {
    const { rows } = await this.pool.query<PgResponseRow>(
      "SELECT id, key_id, created_at, response_json, input_json FROM responses WHERE id = $1 AND key_id IS NOT DISTINCT FROM $2 AND created_at >= $3",
      [id, keyId, this.oldestKept()],
    );
    const row = rows[0];
    if (!row) return null;
    return {
      id: row.id,
      keyId: row.key_id,
      createdAt: Number(row.created_at),
      response: JSON.parse(row.response_json) as StoredResponse["response"],
      input: JSON.parse(row.input_json) as StoredItem[],
    };
  }

  async delete(id: string, keyId: string | null): Promise<boolean> {
    const { rowCount } = await this.pool.query("DELETE FROM responses WHERE id = $1 AND key_id IS NOT DISTINCT FROM $2 AND created_at >= $3", [
      id,
      keyId,
      this.oldestKept(),
    ]);
    return (rowCount ?? 0) > 0;
  }

  async item(itemId: string, keyId: string | null): Promise<StoredItem | null> {
    const { rows } = await this.pool.query<{ item_json: string }>(
      `SELECT i.item_json FROM response_items i JOIN responses r ON r.id = i.response_id
       WHERE i.item_id = $1 AND r.key_id IS NOT DISTINCT FROM $2 AND r.created_at >= $3 ORDER BY r.created_at DESC, r.seq DESC LIMIT 1`,
      [itemId, keyId, this.oldestKept()],
    );
    return rows[0] ? (JSON.parse(rows[0].item_json) as StoredItem) : null;
  }

  async count(): Promise<number> {
    const { rows } = await this.pool.query<{ n: string }>("SELECT count(*) AS n FROM responses");
    return Number(rows[0].n);
  }

  /** Unix seconds of the oldest creation time still kept. */
  private oldestKept(): number {
    return Math.floor(this.now() / 1000) - this.maxAgeSeconds;
  }
}
