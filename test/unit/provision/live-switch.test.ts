/**
 * The promotion watcher over an in-memory database and fake models: a promotion or a rollback row
 * switches the served model to what it names, a load that fails leaves the old one serving (and is
 * not retried until the promotion changes again), and the same artifact promoted again loads
 * nothing.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase, type KilnDatabase } from "../../../src/catalogue/db.js";
import { promoteArtifact, rollbackPromotion, type Promotion } from "../../../src/catalogue/promotions.js";
import { PromotionWatcher, type SwitchLog } from "../../../src/provision/live-switch.js";
import { ModelRegistry, type ServedModel } from "../../../src/scheduler/index.js";
import { fakeModel, SLUG } from "../api/fake-model.js";

let db: KilnDatabase;
let registry: ModelRegistry;
let loads: Array<{ promotion: Promotion | null; replacing: string }>;
let broken: Set<string>;
let lines: string[];

const log: SwitchLog = {
  info: (_, m) => lines.push(`info: ${m}`),
  warn: (_, m) => lines.push(`warn: ${m}`),
  error: (_, m) => lines.push(`error: ${m}`),
};

/** A fake model as loadModel would give it for `promotion` (null: the default compile). */
function modelFor(promotion: Promotion | null): ServedModel {
  const { model } = fakeModel();
  model.artifactId = promotion?.artifactId ?? "default-artifact";
  model.promotion = promotion;
  return model;
}

function watcher(intervalMs?: number): PromotionWatcher {
  return new PromotionWatcher({
    db,
    registry,
    intervalMs,
    log,
    load: async (slug, promotion, _signal, current) => {
      expect(slug).toBe(SLUG);
      loads.push({ promotion, replacing: current.artifactId });
      if (promotion && broken.has(promotion.artifactId)) throw new Error(`${promotion.artifactId} does not match its manifest`);
      return modelFor(promotion);
    },
  });
}

const serving = () => {
  const state = registry.get(SLUG);
  if (state?.status !== "serving" || state.model.kind !== "text") throw new Error("not serving");
  return state.model;
};

beforeEach(() => {
  db = openDatabase({ path: ":memory:" });
  registry = new ModelRegistry({ retireGraceMs: 0 });
  loads = [];
  broken = new Set();
  lines = [];
});
afterEach(async () => {
  await registry.close();
  db.close();
});

describe("PromotionWatcher", () => {
  it("switches to a promoted artifact, and back to the default compile on rollback", async () => {
    const w = watcher();
    registry.serve(modelFor(w.claim(SLUG)));
    await w.poll();
    expect(loads).toEqual([]);

    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-a", settings: { prefillChunk: 128 }, reason: "track: 12% faster decode" });
    await w.poll();
    expect(serving().artifactId).toBe("artifact-a");
    expect(serving().promotion).toMatchObject({ artifactId: "artifact-a", settings: { prefillChunk: 128 }, reason: "track: 12% faster decode" });
    expect(loads.map((l) => [l.promotion?.artifactId ?? null, l.replacing])).toEqual([["artifact-a", "default-artifact"]]);
    await w.poll();
    expect(loads).toHaveLength(1); // nothing changed: nothing loads

    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-b", reason: "operator" });
    await w.poll();
    expect(serving().artifactId).toBe("artifact-b");
    rollbackPromotion(db, SLUG);
    await w.poll();
    expect(serving().artifactId).toBe("artifact-a");
    rollbackPromotion(db, SLUG);
    await w.poll();
    expect(serving().artifactId).toBe("default-artifact");
    expect(serving().promotion).toBeNull();
    expect(loads.map((l) => l.promotion?.artifactId ?? null)).toEqual(["artifact-a", "artifact-b", "artifact-a", null]);
    expect(lines.filter((l) => l.includes("switched to"))).toHaveLength(4);
  });

  it("keeps the old artifact serving when the new one cannot be loaded, and does not retry until the promotion changes", async () => {
    const w = watcher();
    registry.serve(modelFor(w.claim(SLUG)));
    broken.add("artifact-bad");
    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-bad", reason: "broken on purpose" });
    await w.poll();
    expect(serving().artifactId).toBe("default-artifact");
    expect(lines.some((l) => l.startsWith("error: ") && l.includes("does not match its manifest") && l.includes("default-artifact keeps serving"))).toBe(true);
    await w.poll();
    expect(loads).toHaveLength(1);
    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-good", reason: "fixed" });
    await w.poll();
    expect(serving().artifactId).toBe("artifact-good");
  });

  it("starts from the promotion the model was loaded with, and loads nothing for the same artifact promoted again", async () => {
    const first = promoteArtifact(db, { slug: SLUG, artifactId: "artifact-a", settings: { threads: 1 }, reason: "first" });
    const w = watcher();
    const claimed = w.claim(SLUG);
    expect(claimed?.id).toBe(first.id);
    registry.serve(modelFor(claimed));
    await w.poll();
    expect(loads).toEqual([]);
    const again = promoteArtifact(db, { slug: SLUG, artifactId: "artifact-a", settings: { threads: 1 }, reason: "confirmed by a later run" });
    await w.poll();
    expect(loads).toEqual([]);
    expect(serving().promotion?.id).toBe(again.id);
    expect(serving().promotion?.reason).toBe("confirmed by a later run");
    // The same artifact with other settings is served anew.
    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-a", settings: { threads: 2 }, reason: "more threads" });
    await w.poll();
    expect(loads.map((l) => l.promotion?.settings)).toEqual([{ threads: 2 }]);
  });

  it("notices a promotion within its interval, once started", async () => {
    const w = watcher(20);
    registry.serve(modelFor(w.claim(SLUG)));
    w.start();
    try {
      const promotedAt = performance.now();
      promoteArtifact(db, { slug: SLUG, artifactId: "artifact-a", reason: "timer" });
      while (serving().artifactId !== "artifact-a") {
        if (performance.now() - promotedAt > 2000) throw new Error("no switch within 2 s");
        await new Promise((r) => setTimeout(r, 5));
      }
    } finally {
      w.stop();
    }
    const switched = loads.length;
    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-b", reason: "after stop" });
    await new Promise((r) => setTimeout(r, 80));
    expect(loads).toHaveLength(switched);
  });

  it("leaves models that are not serving alone, and says once when the promotions cannot be read", async () => {
    const w = watcher();
    w.claim(SLUG);
    registry.fail(SLUG, "no memory");
    promoteArtifact(db, { slug: SLUG, artifactId: "artifact-a", reason: "x" });
    await w.poll();
    expect(loads).toEqual([]);

    registry.serve(modelFor(null));
    db.exec("ALTER TABLE artifacts_promoted RENAME TO gone");
    await w.poll();
    await w.poll();
    expect(lines.filter((l) => l.startsWith("warn: cannot read the promotions"))).toHaveLength(1);
    expect(serving().artifactId).toBe("default-artifact");
    db.exec("ALTER TABLE gone RENAME TO artifacts_promoted");
    await w.poll();
    expect(serving().artifactId).toBe("artifact-a");
  });
});
