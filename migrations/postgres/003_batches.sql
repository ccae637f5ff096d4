-- The Files and Batch APIs, shared by every replica of a fleet (src/cloud/store/postgres-batches.ts):
-- any replica answers for a key's files and batches, and one replica runs each batch, holding it by
-- a lease (runner, lease_until in Unix milliseconds) that it renews; another replica takes an
-- unfinished batch over once its lease has ended. Times are Unix seconds, as the API answers them;
-- seq orders rows made within the same second.
CREATE TABLE files (
  seq        BIGSERIAL UNIQUE,
  id         TEXT PRIMARY KEY,
  key_id     TEXT,
  created_at BIGINT NOT NULL,
  expires_at BIGINT,
  filename   TEXT NOT NULL,
  purpose    TEXT NOT NULL,
  bytes      BIGINT NOT NULL,
  content    BYTEA NOT NULL
);
CREATE INDEX files_key ON files (key_id, created_at);

CREATE TABLE batches (
  seq         BIGSERIAL UNIQUE,
  id          TEXT PRIMARY KEY,
  key_id      TEXT,
  created_at  BIGINT NOT NULL,
  status      TEXT NOT NULL,
  batch_json  TEXT NOT NULL,
  key_json    TEXT NOT NULL,
  runner      TEXT,
  lease_until BIGINT
);
CREATE INDEX batches_key ON batches (key_id, created_at);
CREATE INDEX batches_unfinished ON batches (status) WHERE status NOT IN ('completed', 'failed', 'expired', 'cancelled');

CREATE TABLE batch_results (
  batch_id    TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
  line        INTEGER NOT NULL,
  failed      BOOLEAN NOT NULL,
  result_json TEXT NOT NULL,
  PRIMARY KEY (batch_id, line)
);
