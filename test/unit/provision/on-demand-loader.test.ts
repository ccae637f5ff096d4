/** What the on-demand loader tells the registry without loading anything: pulled or not, and the memory a model takes; and a model's removal. */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { OnDemandLoader } from "../../../src/provision/index.js";
import type { AnyServedModel } from "../../../src/scheduler/index.js";

const SLUG = "smollm2-135m-instruct";
const MIB = 2 ** 20;
/** SmolLM2-135M's shape: 2 x 30 layers x 3 KV heads x 64 x 4 bytes = 46,080 bytes per position. */
const SHAPE = { architecture: "llama", layers: 30, hidden: 576, heads: 9, kvHeads: 3, headDim: 64, vocab: 49152, contextLength: 8192 };
const STEP = 16 * 128 * 46_080; // one 128-position step of 16 slots

let home: string;
afterEach(() => rmSync(home, { recursive: true, force: true }));

function makeHome(): string {
  home = mkdtempSync(join(tmpdir(), "kiln-on-demand-"));
  return home;
}

function writeArtifact(id: string, createdAt: string, bytes: number[]): void {
  const dir = join(home, "artifacts", SLUG, id);
  mkdirSync(dir, { recursive: true });
  const files = bytes.map((b, i) => ({ path: `f${i}`, bytes: b, sha256: "0".repeat(64) }));
  writeFileSync(join(dir, "manifest.json"), JSON.stringify({ id, slug: SLUG, createdAt, shape: SHAPE, files }));
}

describe("OnDemandLoader", () => {
  it("says a model is pulled once its pull record is there", () => {
    const loader = new OnDemandLoader({ home: makeHome(), text: {}, speech: {} });
    expect(loader.isPulled(SLUG)).toBe(false);
    mkdirSync(join(home, "models", SLUG), { recursive: true });
    writeFileSync(join(home, "models", SLUG, "pulled.json"), "{}");
    expect(loader.isPulled(SLUG)).toBe(true);
  });

  it("removes what is kept of a model, weights and artifacts, so that it is no longer pulled", () => {
    const loader = new OnDemandLoader({ home: makeHome(), text: {}, speech: {} });
    expect(loader.remove(SLUG)).toBe(false);
    mkdirSync(join(home, "models", SLUG), { recursive: true });
    writeFileSync(join(home, "models", SLUG, "pulled.json"), "{}");
    writeArtifact("a1", "2026-01-01T00:00:00Z", [10]);
    expect(loader.remove(SLUG)).toBe(true);
    expect(loader.isPulled(SLUG)).toBe(false);
    expect(existsSync(join(home, "artifacts", SLUG))).toBe(false);
  });

  it("counts the newest artifact's files and the KV budget the model would get within an explicit memory budget", () => {
    const loader = new OnDemandLoader({ home: makeHome(), text: { maxRunning: 16 }, speech: {}, memoryBudgetBytes: 300 * MIB });
    writeArtifact("old", "2026-01-01T00:00:00.000Z", [500 * MIB]);
    writeArtifact("new", "2026-02-01T00:00:00.000Z", [100 * MIB, 40 * MIB]);
    // An eighth of 300 MiB is less than one step: the KV budget is one step, 128 positions per slot.
    expect(loader.memoryBytes(SLUG)).toBe(140 * MIB + STEP);
    const flagged = new OnDemandLoader({ home, text: { maxRunning: 16, kvMemoryBytes: 64 * MIB }, speech: {}, memoryBudgetBytes: 300 * MIB });
    expect(flagged.memoryBytes(SLUG)).toBe(140 * MIB + 64 * MIB);
  });

  it("counts no KV budget for a model on a GPU, whose pool is in the adapter's memory", () => {
    const loader = new OnDemandLoader({ home: makeHome(), text: { maxRunning: 16, session: { device: "webgpu" } }, speech: {}, memoryBudgetBytes: 300 * MIB });
    writeArtifact("gpu", "2026-02-01T00:00:00.000Z", [100 * MIB]);
    expect(loader.memoryBytes(SLUG)).toBe(100 * MIB);
    const served = { kind: "text", slug: SLUG, artifactId: "gpu", kvMemoryBytes: 64 * MIB } as const;
    expect(loader.memoryBytes(SLUG, { ...served, device: "webgpu" } as unknown as AnyServedModel)).toBe(100 * MIB);
    expect(loader.memoryBytes(SLUG, { ...served, device: "cpu" } as unknown as AnyServedModel)).toBe(100 * MIB + 64 * MIB);
  });

  it("estimates a model never compiled from the catalogue's pinned sizes", () => {
    const loader = new OnDemandLoader({ home: makeHome(), text: {}, speech: {}, memoryBudgetBytes: 8 * 1024 * MIB });
    const entry = getModel("whisper-tiny-en");
    const source = entry.sources[0];
    const sourceBytes = source.type === "hub" ? source.files.reduce((n, f) => n + (f.bytes ?? 0), 0) : 0;
    expect(sourceBytes).toBeGreaterThan(0);
    // A speech model: its artifact (about twice its float16 weights) plus a quarter.
    expect(loader.memoryBytes("whisper-tiny-en")).toBe(Math.round(Math.round(sourceBytes * 2) * 1.25));
  });
});
