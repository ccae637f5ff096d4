import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { applySchema, openDatabase } from "../../../src/catalogue/db.js";
import { currentPromotion, promoteArtifact, promotionHistory, rollbackPromotion } from "../../../src/catalogue/promotions.js";

const SLUG = "smollm2-135m-instruct";

describe("promotions", () => {
  it("the latest promoted row serves; rollback returns to the one before, then to the default", () => {
    const db = openDatabase({ path: ":memory:" });
    expect(currentPromotion(db, SLUG)).toBeNull();
    promoteArtifact(db, { slug: SLUG, artifactId: "a1", settings: { threads: 2 }, metrics: { decode: 1 }, reason: "first" });
    const second = promoteArtifact(db, { slug: SLUG, artifactId: "a2", reason: "second" });
    expect(second).toMatchObject({ artifactId: "a2", settings: {}, reason: "second", promoted: true });
    expect(currentPromotion(db, "qwen-2-5-0-5b-instruct")).toBeNull();
    expect(rollbackPromotion(db, SLUG)).toMatchObject({ artifactId: "a1", settings: { threads: 2 }, metrics: { decode: 1 } });
    expect(rollbackPromotion(db, SLUG)).toBeNull();
    expect(() => rollbackPromotion(db, SLUG)).toThrow(/no promoted artifact/);
    expect(promotionHistory(db, SLUG).map((p) => [p.artifactId, p.promoted])).toEqual([
      ["a2", false],
      ["a1", false],
    ]);
    db.close();
  });

  it("an older database gains the new columns when the schema is applied", () => {
    const db = new Database(":memory:");
    db.exec(`CREATE TABLE artifacts_promoted (id TEXT PRIMARY KEY, slug TEXT NOT NULL, artifact_id TEXT NOT NULL,
      metrics_json TEXT NOT NULL DEFAULT '{}', quality_json TEXT NOT NULL DEFAULT '{}', promoted INTEGER NOT NULL DEFAULT 1,
      created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))`);
    db.exec(`INSERT INTO artifacts_promoted (id, slug, artifact_id) VALUES ('x', '${SLUG}', 'old')`);
    applySchema(db);
    applySchema(db);
    expect(currentPromotion(db, SLUG)).toMatchObject({ artifactId: "old", settings: {}, reason: "" });
    db.close();
  });
});
