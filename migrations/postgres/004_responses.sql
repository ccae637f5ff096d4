-- Stored responses of the Responses API, shared by every replica of a fleet
-- (src/cloud/store/postgres-responses.ts), so that `previous_response_id` and GET
-- /v1/responses/{id} find a response whichever replica answered it. created_at: Unix seconds; seq
-- orders responses made within the same second for retention.
CREATE TABLE responses (
  seq           BIGSERIAL UNIQUE,
  id            TEXT PRIMARY KEY,
  key_id        TEXT,
  created_at    BIGINT NOT NULL,
  response_json TEXT NOT NULL,
  input_json    TEXT NOT NULL
);
CREATE INDEX responses_created ON responses (created_at);

-- Each stored response's input and output items by id, for `item_reference` input items.
CREATE TABLE response_items (
  item_id     TEXT NOT NULL,
  response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
  item_json   TEXT NOT NULL,
  PRIMARY KEY (item_id, response_id)
);
CREATE INDEX response_items_response ON response_items (response_id);
