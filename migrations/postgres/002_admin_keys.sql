-- Admin keys: besides what any key does, they may take the console's operator actions (promote,
-- rollback). Existing keys stay plain client keys.
ALTER TABLE api_keys ADD COLUMN admin BOOLEAN NOT NULL DEFAULT false;
