-- Cloud mode's shared database (kiln serve --cloud --database postgres://...).
-- Applied once, in order, by src/cloud/store/postgres-migrate.ts (recorded in schema_migrations).
-- Money: BIGINT nano-USD (1e-9 USD); the rounding rule is in src/cloud/money.ts.

-- API keys: only HMAC-SHA256(server secret, key) is stored. Limits: NULL = unlimited.
CREATE TABLE api_keys (
  id                      TEXT PRIMARY KEY,
  name                    TEXT NOT NULL,
  key_hash                TEXT NOT NULL UNIQUE,
  key_prefix              TEXT NOT NULL,
  models                  TEXT[],
  rpm                     INTEGER,
  tpm                     INTEGER,
  max_concurrent          INTEGER,
  budget_nano_usd_per_day BIGINT,
  created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at              TIMESTAMPTZ,
  revoked_at              TIMESTAMPTZ
);

-- The usage ledger: append-only, one row per request id; prices are those in force for the request
-- (nano-USD per million tokens, per audio minute).
CREATE TABLE usage_ledger (
  request_id                TEXT PRIMARY KEY,
  key_id                    TEXT REFERENCES api_keys (id) ON DELETE SET NULL,
  slug                      TEXT NOT NULL,
  artifact_id               TEXT,
  prompt_tokens             BIGINT NOT NULL,
  completion_tokens         BIGINT NOT NULL,
  audio_ms                  BIGINT NOT NULL,
  input_nano_usd_per_mtok   BIGINT NOT NULL,
  output_nano_usd_per_mtok  BIGINT NOT NULL,
  nano_usd_per_audio_minute BIGINT NOT NULL,
  cost_nano_usd             BIGINT NOT NULL CHECK (cost_nano_usd >= 0),
  settled_from              TEXT NOT NULL CHECK (settled_from IN ('completed', 'cancelled', 'shutdown', 'failed', 'reservation')),
  replica_id                TEXT NOT NULL,
  created_at                TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_ledger_key_time ON usage_ledger (key_id, created_at);
CREATE INDEX usage_ledger_slug_time ON usage_ledger (slug, created_at);
CREATE INDEX usage_ledger_time ON usage_ledger (created_at);

-- What each admitted request may cost at most, until its ledger row is written (and this row
-- deleted, in the same transaction).
CREATE TABLE usage_reservations (
  request_id                TEXT PRIMARY KEY,
  key_id                    TEXT NOT NULL,
  slug                      TEXT NOT NULL,
  artifact_id               TEXT,
  prompt_tokens             BIGINT NOT NULL,
  completion_tokens         BIGINT NOT NULL,
  audio_ms                  BIGINT NOT NULL,
  input_nano_usd_per_mtok   BIGINT NOT NULL,
  output_nano_usd_per_mtok  BIGINT NOT NULL,
  nano_usd_per_audio_minute BIGINT NOT NULL,
  nano_usd                  BIGINT NOT NULL,
  replica_id                TEXT NOT NULL,
  created_at                TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_reservations_replica ON usage_reservations (replica_id);

-- Serving replicas and when each was last heard of.
CREATE TABLE replicas (
  id        TEXT PRIMARY KEY,
  last_seen TIMESTAMPTZ NOT NULL
);
