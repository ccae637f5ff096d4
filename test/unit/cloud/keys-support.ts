/** API keys over an SQLite database for tests: the real key store, with a fixed test secret. */
import { KeyStore } from "../../../src/cloud/keys/key-store.js";
import { SqliteCloudStore } from "../../../src/cloud/store/sqlite-store.js";
import type { KilnDatabase } from "../../../src/catalogue/db.js";

export const TEST_KEY_SECRET = Buffer.from("kiln-test-secret-0123456789abcdef");

/** Keys in `db`'s `api_keys` table, hashed with {@link TEST_KEY_SECRET}; no cache, so a revocation shows at once. */
export function sqliteKeyStore(db: KilnDatabase): KeyStore {
  return new KeyStore(new SqliteCloudStore(db), TEST_KEY_SECRET, { cacheMs: 0 });
}
