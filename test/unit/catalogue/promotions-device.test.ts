/** Promotions are per device: a GPU promotion never serves on the CPU, and rolling one back leaves the other device's alone. */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase, type KilnDatabase } from "../../../src/catalogue/db.js";
import { currentPromotion, promoteArtifact, promotionDevice, rollbackPromotion } from "../../../src/catalogue/promotions.js";

const SLUG = "smollm2-135m-instruct";
let db: KilnDatabase;
beforeEach(() => {
  db = openDatabase({ path: ":memory:" });
});
afterEach(() => db.close());

describe("promotions per device", () => {
  it("keeps each device's current promotion apart; settings naming no device are the CPU's", () => {
    promoteArtifact(db, { slug: SLUG, artifactId: "cpu-a", settings: { prefillChunk: 128 }, reason: "track" });
    promoteArtifact(db, { slug: SLUG, artifactId: "gpu-a", settings: { device: "webgpu", maxRunning: 64 }, reason: "track on webgpu" });
    expect(currentPromotion(db, SLUG)?.artifactId).toBe("cpu-a");
    expect(currentPromotion(db, SLUG, "cpu")?.artifactId).toBe("cpu-a");
    expect(currentPromotion(db, SLUG, "webgpu")?.artifactId).toBe("gpu-a");
    expect(promotionDevice({})).toBe("cpu");
    expect(promotionDevice({ device: "webgpu" })).toBe("webgpu");
  });

  it("rolls back one device's promotion only", () => {
    promoteArtifact(db, { slug: SLUG, artifactId: "cpu-a", reason: "track" });
    promoteArtifact(db, { slug: SLUG, artifactId: "gpu-a", settings: { device: "webgpu" }, reason: "track on webgpu" });
    promoteArtifact(db, { slug: SLUG, artifactId: "gpu-b", settings: { device: "webgpu" }, reason: "track on webgpu" });
    expect(rollbackPromotion(db, SLUG, "webgpu")?.artifactId).toBe("gpu-a");
    expect(currentPromotion(db, SLUG)?.artifactId).toBe("cpu-a");
    expect(rollbackPromotion(db, SLUG)).toBeNull();
    expect(currentPromotion(db, SLUG, "webgpu")?.artifactId).toBe("gpu-a");
    expect(() => rollbackPromotion(db, "qwen-2-5-0-5b-instruct", "webgpu")).toThrow("has no promoted artifact to roll back on webgpu");
  });
});
