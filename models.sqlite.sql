-- kiln's records: the schema of $KILN_HOME/kiln.sqlite.
-- Applied on every open by src/catalogue/db.ts; every statement is idempotent.
-- The `models` and `weight_sources` tables mirror src/catalogue/models.ts (re-seeded on open);
-- the other tables hold what kiln does with those models.

PRAGMA foreign_keys = ON;

-- One row per catalogue entry.
CREATE TABLE IF NOT EXISTS models (
  slug                          TEXT PRIMARY KEY CHECK (slug GLOB '[a-z0-9]*' AND slug NOT GLOB '*[^a-z0-9-]*'
                                                             AND slug NOT GLOB '*--*' AND slug NOT GLOB '*-'),
  position                      INTEGER NOT NULL,             -- order in the catalogue
  display_name                  TEXT NOT NULL,
  kind                          TEXT NOT NULL CHECK (kind IN ('text', 'transcription')),
  family                        TEXT NOT NULL,
  parameters                    INTEGER NOT NULL CHECK (parameters > 0),
  architecture                  TEXT NOT NULL,
  context_length                INTEGER NOT NULL CHECK (context_length > 0),
  capabilities_json             TEXT NOT NULL,                -- JSON array of capability names
  input_usd_per_million_tokens  REAL,                         -- text models
  output_usd_per_million_tokens REAL,                         -- text models
  usd_per_audio_minute          REAL,                         -- transcription models
  ttft_target_ms                INTEGER,
  output_tokens_per_second      INTEGER,
  licence                       TEXT NOT NULL,
  upstream                      TEXT NOT NULL,
  embedded                      INTEGER NOT NULL DEFAULT 0 CHECK (embedded IN (0, 1)),
  entry_json                    TEXT NOT NULL,                -- the whole catalogue entry, as in models.ts
  updated_at                    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  CHECK ((kind = 'text' AND input_usd_per_million_tokens IS NOT NULL AND output_usd_per_million_tokens IS NOT NULL)
      OR (kind = 'transcription' AND usd_per_audio_minute IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS models_kind ON models (kind, position);

-- The weight sources of each model, in try order.
CREATE TABLE IF NOT EXISTS weight_sources (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  slug        TEXT NOT NULL REFERENCES models (slug) ON DELETE CASCADE,
  position    INTEGER NOT NULL,                               -- 0 = tried first
  type        TEXT NOT NULL CHECK (type IN ('hub', 'python-package')),
  format      TEXT NOT NULL,                                  -- gguf | ctranslate2 | ggml
  repo        TEXT,                                           -- hub
  revision    TEXT,                                           -- hub
  package     TEXT,                                           -- python-package
  version     TEXT,                                           -- python-package
  files_json  TEXT NOT NULL,                                  -- [{path, sha256?, bytes?}] or package members
  UNIQUE (slug, position)
);

-- One row per compile of a model's weights into an ONNX artifact.
CREATE TABLE IF NOT EXISTS compiles (
  id               TEXT PRIMARY KEY,
  slug             TEXT NOT NULL REFERENCES models (slug) ON DELETE CASCADE,
  artifact_id      TEXT NOT NULL,
  artifact_dir     TEXT NOT NULL,
  source_sha256    TEXT,
  compiler_version TEXT NOT NULL,
  options_json     TEXT NOT NULL DEFAULT '{}',
  manifest_json    TEXT,
  started_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  finished_at      TEXT,
  status           TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
  error            TEXT
);
CREATE INDEX IF NOT EXISTS compiles_slug ON compiles (slug, started_at);
CREATE INDEX IF NOT EXISTS compiles_artifact ON compiles (artifact_id);
CREATE INDEX IF NOT EXISTS compiles_status ON compiles (status);

-- An early placeholder for the optimization track, never written: track_candidates below holds
-- the track's records. Kept so that databases that have it open unchanged.
CREATE TABLE IF NOT EXISTS optimization_runs (
  id           TEXT PRIMARY KEY,
  slug         TEXT NOT NULL REFERENCES models (slug) ON DELETE CASCADE,
  artifact_id  TEXT NOT NULL,
  metrics_json TEXT NOT NULL DEFAULT '{}',                    -- speed: ttft, tokens/s, memory ...
  quality_json TEXT NOT NULL DEFAULT '{}',                    -- agreement with the reference ...
  promoted     INTEGER NOT NULL DEFAULT 0 CHECK (promoted IN (0, 1)),
  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS optimization_runs_slug ON optimization_runs (slug, created_at);

-- The optimization track (src/track/): one row per measurement of a model's candidate,
-- the incumbent's two noise repeats included. A row is written when its measurement starts
-- ('running'), so a track process that dies leaves a trace; the next run of that model (or the
-- scheduler that started the process) marks it 'failed'. settings_json: compile, runtime and
-- serving settings (accuracyLevel, numerics, threads, graphOptimizationLevel, prefillChunk,
-- maxRunning, stepTokens); metrics_json: decode_tokens_per_second, prefill_tokens_per_second,
-- batch<N>_tokens_per_second, ttft_ms, peak_rss_mb ...; quality_json: kl_divergence,
-- perplexity_ratio, top1_agreement against the exact-numerics reference; machine_json: cpu, cores,
-- threads used, pid ...; change: how the settings differ from the incumbent's.
CREATE TABLE IF NOT EXISTS track_candidates (
  id            TEXT PRIMARY KEY,
  run_id        TEXT NOT NULL,                                -- one `kiln track run` (one night)
  slug          TEXT NOT NULL REFERENCES models (slug) ON DELETE CASCADE,
  artifact_id   TEXT NOT NULL DEFAULT '',                     -- '' when it failed before it had one
  settings_json TEXT NOT NULL DEFAULT '{}',
  change        TEXT NOT NULL DEFAULT '',
  metrics_json  TEXT NOT NULL DEFAULT '{}',
  quality_json  TEXT NOT NULL DEFAULT '{}',
  machine_json  TEXT NOT NULL DEFAULT '{}',
  started_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  finished_at   TEXT,
  verdict       TEXT NOT NULL DEFAULT 'running' CHECK (verdict IN ('running', 'incumbent', 'promoted', 'rejected', 'failed')),
  reason        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS track_candidates_slug ON track_candidates (slug, started_at);
CREATE INDEX IF NOT EXISTS track_candidates_running ON track_candidates (verdict) WHERE verdict = 'running';

-- Artifacts promoted to serve a model: the latest row per slug with promoted = 1 is the one in
-- service (a rollback sets the current row's promoted to 0, so the one before serves again).
-- settings_json: the runtime and serving settings the artifact is served with (threads, prefill
-- chunk, ...), measured with it as one candidate.
CREATE TABLE IF NOT EXISTS artifacts_promoted (
  id            TEXT PRIMARY KEY,
  slug          TEXT NOT NULL REFERENCES models (slug) ON DELETE CASCADE,
  artifact_id   TEXT NOT NULL,
  metrics_json  TEXT NOT NULL DEFAULT '{}',
  quality_json  TEXT NOT NULL DEFAULT '{}',
  promoted      INTEGER NOT NULL DEFAULT 1 CHECK (promoted IN (0, 1)),
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  settings_json TEXT NOT NULL DEFAULT '{}',
  reason        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS artifacts_promoted_slug ON artifacts_promoted (slug, created_at);

-- API keys of cloud mode: only a keyed hash of the key (HMAC-SHA256 with the server secret, kept
-- outside this file) is stored. models_json: null = all models, else an array of slugs. Limits:
-- null = unlimited. Columns after revoked_at were added later: src/cloud/store/sqlite-store.ts adds
-- them to older databases (and creates the indexes that use them).
CREATE TABLE IF NOT EXISTS api_keys (
  id                      TEXT PRIMARY KEY,
  name                    TEXT NOT NULL,
  key_hash                TEXT NOT NULL UNIQUE,
  models_json             TEXT,
  created_at              TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  revoked_at              TEXT,
  key_prefix              TEXT NOT NULL DEFAULT '',
  rpm                     INTEGER,
  tpm                     INTEGER,
  max_concurrent          INTEGER,
  budget_nano_usd_per_day INTEGER,
  expires_at              TEXT,
  -- 1 = an admin key: it may also take the console's operator actions (promote, rollback).
  admin                   INTEGER NOT NULL DEFAULT 0
);

-- The usage ledger: append-only, one row per request id. Money in integer nano-USD (see
-- src/cloud/money.ts for the one rounding rule); prices are those in force for the request.
-- audio_seconds and cost_usd are legacy (float) columns, no longer written. No foreign key on
-- slug: billing history outlives catalogue edits.
CREATE TABLE IF NOT EXISTS usage (
  request_id                TEXT PRIMARY KEY,
  key_id                    TEXT REFERENCES api_keys (id) ON DELETE SET NULL,
  slug                      TEXT NOT NULL,
  prompt_tokens             INTEGER NOT NULL DEFAULT 0,
  completion_tokens         INTEGER NOT NULL DEFAULT 0,
  audio_seconds             REAL NOT NULL DEFAULT 0,
  cost_usd                  REAL NOT NULL DEFAULT 0,
  created_at                TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  artifact_id               TEXT,
  audio_ms                  INTEGER NOT NULL DEFAULT 0,
  input_nano_usd_per_mtok   INTEGER NOT NULL DEFAULT 0,
  output_nano_usd_per_mtok  INTEGER NOT NULL DEFAULT 0,
  nano_usd_per_audio_minute INTEGER NOT NULL DEFAULT 0,
  cost_nano_usd             INTEGER NOT NULL DEFAULT 0,
  settled_from              TEXT NOT NULL DEFAULT 'completed',
  replica_id                TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS usage_key_time ON usage (key_id, created_at);
CREATE INDEX IF NOT EXISTS usage_slug_time ON usage (slug, created_at);

-- What each admitted request may cost at most, until its ledger row is written (then deleted in
-- the same transaction); a replica that dies leaves its reservations to be charged by another.
CREATE TABLE IF NOT EXISTS usage_reservations (
  request_id                TEXT PRIMARY KEY,
  key_id                    TEXT NOT NULL,
  slug                      TEXT NOT NULL,
  artifact_id               TEXT,
  prompt_tokens             INTEGER NOT NULL,
  completion_tokens         INTEGER NOT NULL,
  audio_ms                  INTEGER NOT NULL DEFAULT 0,
  input_nano_usd_per_mtok   INTEGER NOT NULL,
  output_nano_usd_per_mtok  INTEGER NOT NULL,
  nano_usd_per_audio_minute INTEGER NOT NULL,
  nano_usd                  INTEGER NOT NULL,
  replica_id                TEXT NOT NULL,
  created_at                TEXT NOT NULL
);

-- Serving replicas and when each was last heard of (cloud mode's heartbeat).
CREATE TABLE IF NOT EXISTS replicas (
  id        TEXT PRIMARY KEY,
  last_seen TEXT NOT NULL
);

-- Stored responses of the Responses API (POST /v1/responses with `store`, its default), kept for
-- `previous_response_id` and GET/DELETE /v1/responses/{id} (src/catalogue/stored-responses.ts).
-- key_id: the cloud key that made it, NULL in local mode; only that key finds it. created_at: Unix
-- seconds. response_json: the response object as answered; input_json: every item the model saw
-- before answering (the earlier responses' inputs and outputs, then this request's input), each
-- with its id. Retention (`kiln serve --stored-responses`, `--stored-response-days`) deletes the
-- oldest rows as new ones are stored.
CREATE TABLE IF NOT EXISTS responses (
  id            TEXT PRIMARY KEY,
  key_id        TEXT,
  created_at    INTEGER NOT NULL,
  response_json TEXT NOT NULL,
  input_json    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);

-- Each stored response's input and output items by id, for `item_reference` input items.
CREATE TABLE IF NOT EXISTS response_items (
  item_id     TEXT NOT NULL,
  response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
  item_json   TEXT NOT NULL,
  PRIMARY KEY (item_id, response_id)
);
CREATE INDEX IF NOT EXISTS response_items_response ON response_items (response_id);

-- Files of the Files API (POST /v1/files; a batch's output and error files), kept until deleted or
-- past expires_at (src/catalogue/stored-files.ts). key_id: the cloud key that owns it, NULL in
-- local mode; only that key finds it. purpose: `batch` for a batch's input, `batch_output` for what
-- a batch wrote, or another of the reference API's purposes. created_at, expires_at: Unix seconds
-- (expires_at NULL: kept until deleted). content: the file's bytes.
CREATE TABLE IF NOT EXISTS files (
  id         TEXT PRIMARY KEY,
  key_id     TEXT,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  filename   TEXT NOT NULL,
  purpose    TEXT NOT NULL,
  bytes      INTEGER NOT NULL,
  content    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS files_key ON files (key_id, created_at);

-- Batches of the Batch API (POST /v1/batches; src/catalogue/stored-batches.ts): batch_json is the
-- batch object as GET /v1/batches/{id} answers it; key_json the key it runs as (id, name, models,
-- limits), so that a batch left unfinished by a stopped server resumes under the same key. runner:
-- the server process that runs it, until lease_until (Unix milliseconds), renewed while it runs; an
-- unfinished batch whose lease has ended is taken by the next server to look.
CREATE TABLE IF NOT EXISTS batches (
  id          TEXT PRIMARY KEY,
  key_id      TEXT,
  created_at  INTEGER NOT NULL,
  status      TEXT NOT NULL,
  batch_json  TEXT NOT NULL,
  key_json    TEXT NOT NULL,
  runner      TEXT,
  lease_until INTEGER
);
CREATE INDEX IF NOT EXISTS batches_key ON batches (key_id, created_at);

-- Each answered line of an unfinished batch (line: its 0-based place in the input file), so that a
-- resumed batch skips what it has; failed: 1 when it goes to the error file. Gathered into the
-- output and error files when the batch finalizes, then deleted.
CREATE TABLE IF NOT EXISTS batch_results (
  batch_id    TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
  line        INTEGER NOT NULL,
  failed      INTEGER NOT NULL,
  result_json TEXT NOT NULL,
  PRIMARY KEY (batch_id, line)
);
