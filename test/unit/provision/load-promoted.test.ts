/**
 * loadModel serves what is promoted: the promoted artifact (verified against its manifest) with its
 * settings where the caller left them unset; the default compile when nothing is promoted, when
 * compile options ask for a build, or (with a warning) when the promoted artifact is missing or
 * damaged. A tiny GGUF from a local hub stands in for the model's weights.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, truncateSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { promoteArtifact, rollbackPromotion } from "../../../src/catalogue/promotions.js";
import { loadModel, type LoadModelOptions, PromotedArtifactError, promotedSettings, provisionArtifact } from "../../../src/provision/index.js";
import type { ServedModel } from "../../../src/scheduler/index.js";
import { writeTinyGguf } from "./tiny-gguf.js";

const SLUG = "smollm2-135m-instruct"; // any catalogue text model: the source below replaces its own

let server: http.Server;
let home: string;
let warnings: string[];
let defaultId: string;
let otherId: string;
let otherDir: string;

function options(over: LoadModelOptions = {}): LoadModelOptions {
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const source = { type: "hub" as const, repo: "test/tiny", revision: "main", format: "gguf" as const, files: [{ path: "tiny.gguf" }] };
  return {
    home,
    pull: { sources: [source], hubEndpoint: endpoint, hubToken: null, retries: 0 },
    kvMemoryBytes: 1 << 20,
    onWarning: (m) => warnings.push(m),
    ...over,
  };
}

function promote(artifactId: string, settings: Record<string, unknown> = {}) {
  const db = openDatabase({ home });
  try {
    return promoteArtifact(db, { slug: SLUG, artifactId, settings, reason: "test" });
  } finally {
    db.close();
  }
}

function rollback(): void {
  const db = openDatabase({ home });
  try {
    rollbackPromotion(db, SLUG);
  } finally {
    db.close();
  }
}

/** Loads, reads what the test needs, and closes (each load is a worker thread). */
async function served(over: LoadModelOptions = {}) {
  warnings = [];
  const model: ServedModel = await loadModel(SLUG, options(over));
  try {
    return { artifactId: model.artifactId, promotion: model.promotion, slots: model.engine.stats.snapshot().slots, warnings };
  } finally {
    await model.close();
  }
}

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "kiln-promoted-"));
  await writeTinyGguf(join(home, "tiny.gguf"), 3);
  const gguf = readFileSync(join(home, "tiny.gguf"));
  server = http.createServer((req, res) => {
    if (req.url !== "/test/tiny/resolve/main/tiny.gguf") return void res.writeHead(404).end();
    res.writeHead(200, { "content-length": String(gguf.length), etag: createHash("sha256").update(gguf).digest("hex") });
    res.end(req.method === "HEAD" ? undefined : gguf);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  defaultId = (await provisionArtifact(SLUG, options())).manifest.id;
  const other = await provisionArtifact(SLUG, { ...options(), compile: { accuracyLevel: 0 } });
  otherId = other.manifest.id;
  otherDir = other.dir;
  expect(otherId).not.toBe(defaultId);
});
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(home, { recursive: true, force: true });
});

describe("loadModel and promotions", () => {
  it("serves the default compile when nothing is promoted", async () => {
    expect(await served()).toMatchObject({ artifactId: defaultId, promotion: null, slots: 16, warnings: [] });
  });

  it("serves the promoted artifact with its settings, where the caller gave none", async () => {
    const promotion = promote(otherId, { maxRunning: 3, prefillChunk: 64, accuracyLevel: 0 });
    const got = await served();
    expect(got).toMatchObject({ artifactId: otherId, slots: 3 });
    expect(got.promotion?.id).toBe(promotion.id);
    // A setting kiln does not apply is named, never silently taken for applied.
    expect(got.warnings).toEqual([expect.stringContaining("that kiln does not apply: accuracyLevel=0")]);
    // What the caller sets wins (kiln serve passes only the flags given on its command line).
    expect(await served({ maxRunning: 2 })).toMatchObject({ artifactId: otherId, slots: 2 });
    // Compile options ask for that build, whatever is promoted.
    expect(await served({ compile: { accuracyLevel: 4 } })).toMatchObject({ artifactId: defaultId, promotion: null });
    // An explicit promotion (the live switch passes the one it saw) is served as given.
    expect(await served({ promotion: null })).toMatchObject({ artifactId: defaultId, promotion: null });
    rollback();
    expect(await served()).toMatchObject({ artifactId: defaultId, promotion: null });
  });

  it("falls back to the default compile, loudly, when the promoted artifact is missing or damaged", async () => {
    promote(`${SLUG}-000000000000`);
    const missing = await served();
    expect(missing).toMatchObject({ artifactId: defaultId, promotion: null });
    expect(missing.warnings).toEqual([
      expect.stringMatching(/promoted for smollm2-135m-instruct cannot be served: .* has no manifest.*; serving the default compile instead/),
    ]);
    rollback();

    promote("../../escape");
    expect((await served()).warnings).toEqual([expect.stringContaining("that is not an artifact id")]);
    rollback();

    promote(otherId);
    const data = join(otherDir, "model.onnx.data");
    const good = readFileSync(data);
    truncateSync(data, good.length - 64);
    try {
      const damaged = await served();
      expect(damaged).toMatchObject({ artifactId: defaultId, promotion: null });
      expect(damaged.warnings[0]).toMatch(/model\.onnx\.data is \d+ bytes, the manifest says \d+; serving the default compile instead/);
      // A live switch would rather keep what serves: it asks for no fallback.
      await expect(loadModel(SLUG, options({ fallback: false }))).rejects.toBeInstanceOf(PromotedArtifactError);
    } finally {
      rollback();
    }
  });
});

describe("promotedSettings", () => {
  it("takes the settings kiln applies, within their flags' ranges, and names the rest", () => {
    expect(
      promotedSettings({ threads: 4, maxRunning: 8, prefillChunk: 512, stepTokens: 1024, prefixReuse: "any", graphOptimizationLevel: "extended" }),
    ).toEqual({
      settings: { threads: 4, maxRunning: 8, prefillChunk: 512, stepTokens: 1024, prefixReuse: "any", graphOptimizationLevel: "extended" },
      ignored: [],
    });
    expect(promotedSettings({ threads: 0, maxRunning: 2.5, prefixReuse: "all", kvChunk: 64 })).toEqual({
      settings: {},
      ignored: ["threads=0", "maxRunning=2.5", 'prefixReuse="all"', "kvChunk=64"],
    });
  });
});
