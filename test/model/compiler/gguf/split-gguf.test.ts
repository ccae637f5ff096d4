/**
 * Split GGUF sets (`name-00001-of-0000N.gguf`, as llama.cpp's gguf-split writes them) are read as one
 * model: a tiny synthetic Llama written whole and split into three shards (by
 * test/fixtures/gguf/split-gguf.ts) has the same tensor table and tensor bytes through kiln's reader,
 * compiles to the same artifact (same graph, same weights bytes; only the artifact id, which hashes
 * the source files, differs), and loads in llama.cpp (node-llama-cpp) with the same outputs. Also
 * here, because it needs a model: an artifact whose weights go over several external data files
 * (`model.onnx.data`, `.1`, ...) loads in onnxruntime and gives the same logits, bit for bit.
 */
import { mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf, SourceChangedError } from "../../../../src/compiler/compile.js";
import { GgufSplitError } from "../../../../src/compiler/gguf/errors.js";
import { readGguf, readTensorBytes } from "../../../../src/compiler/gguf/reader.js";
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { ARTIFACT_FILES } from "../../../../src/runtime/artifact/index.js";
import { TextSession } from "../../../../src/runtime/text-worker/session.js";
import { splitGguf } from "../../../fixtures/gguf/split-gguf.js";
import { writeTinyModel } from "../../../fixtures/synthetic/tiny-model.js";
import { llamaCppReference, makeRuns, syntheticTokenizer } from "../../../support/synthetic-parity.js";

const { Q8_0, Q4_K, Q6_K, F16 } = GgmlType;

let dir: string;
let whole: string;
let shards: string[];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "kiln-split-"));
  whole = join(dir, "tiny.gguf");
  await writeTinyModel(
    whole,
    {
      architecture: "llama",
      seed: 12,
      layers: 2,
      hidden: 256,
      heads: 4,
      kvHeads: 2,
      ffn: 512,
      contextLength: 256,
      ropeTheta: 10000,
      rmsEps: 1e-6,
      types: { embedding: Q8_0, output: Q6_K, attnQ: Q4_K, attnK: Q4_K, attnV: Q8_0, attnOutput: Q8_0, ffnGate: Q4_K, ffnUp: Q4_K, ffnDown: F16 },
    },
    await syntheticTokenizer(),
  );
  shards = await splitGguf(whole, join(dir, "tiny"), 3);
}, 60_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("split GGUF", () => {
  it("reads the set as one model: the first shard's metadata, every shard's tensors with their bytes", async () => {
    const a = await readGguf(whole);
    const b = await readGguf(shards[0]);
    expect(b.shards).toEqual(shards);
    expect(b.metadata["general.architecture"]).toBe("llama");
    expect(b.metadata["split.count"]).toBe(3);
    expect(b.tensors.map((t) => [t.name, t.dims, t.type])).toEqual(a.tensors.map((t) => [t.name, t.dims, t.type]));
    expect(new Set(b.tensors.map((t) => t.path))).toEqual(new Set(shards));
    for (let i = 0; i < a.tensors.length; i++) {
      expect(Buffer.from(await readTensorBytes(b, b.tensors[i])).equals(Buffer.from(await readTensorBytes(a, a.tensors[i]))), a.tensors[i].name).toBe(true);
    }
  });

  it("refuses a later shard opened alone, and a set with a shard missing, naming the file", async () => {
    await expect(readGguf(shards[1])).rejects.toThrow(GgufSplitError);
    await expect(readGguf(shards[1])).rejects.toThrow(/shard 2 of 3; open the first/);
    const aside = `${shards[2]}.aside`;
    renameSync(shards[2], aside);
    try {
      await expect(readGguf(shards[0])).rejects.toThrow(/tiny-00003-of-00003\.gguf: split GGUF: shard 3 of 3 is missing/);
    } finally {
      renameSync(aside, shards[2]);
    }
  });

  it("compiles to the same graph and weights as the unsplit file, and checks every shard's hash", async () => {
    const home = join(dir, "home");
    const one = await compileGguf({ slug: "tiny", ggufPath: whole, home, options: { numerics: "llama.cpp" } });
    const set = await compileGguf({ slug: "tiny", ggufPath: shards[0], home, options: { numerics: "llama.cpp" } });
    expect(set.dir).not.toBe(one.dir);
    const read = (d: string, f: string) => readFileSync(join(d, f));
    expect(read(set.dir, ARTIFACT_FILES.weights).equals(read(one.dir, ARTIFACT_FILES.weights))).toBe(true);
    // The graph names its artifact id; with the ids made equal the graphs are byte for byte the same.
    const graph = (d: string, id: string) => read(d, ARTIFACT_FILES.graph).toString("latin1").replaceAll(id, "ID");
    expect(graph(set.dir, set.manifest.id) === graph(one.dir, one.manifest.id)).toBe(true);
    expect(read(set.dir, ARTIFACT_FILES.tokenizer).equals(read(one.dir, ARTIFACT_FILES.tokenizer))).toBe(true);
    expect(set.manifest.shape).toEqual(one.manifest.shape);
    expect(set.manifest.source.bytes).toBeGreaterThan(one.manifest.source.bytes);
    expect(set.manifest.choices.find((c) => c.what === "source")?.choice).toMatch(/split GGUF of 3 shards read as one: tiny-00001-of-00003\.gguf/);

    // A shard other than the first that differs from its recorded hash is refused.
    const err = await compileGguf({ slug: "tiny", ggufPath: shards[0], home, force: true, shardSha256: { "tiny-00002-of-00003.gguf": "0".repeat(64) } }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SourceChangedError);
    expect((err as Error).message).toContain("tiny-00002-of-00003.gguf");
  }, 120_000);

  it("serves an artifact whose weights are spread over several data files exactly as from one", async () => {
    const home = join(dir, "home-multi");
    const one = await compileGguf({ slug: "tiny", ggufPath: whole, home });
    const many = await compileGguf({ slug: "tiny", ggufPath: whole, home: join(home, "b"), maxWeightsFileBytes: 1 << 20 });
    const dataFiles = many.manifest.files.map((f) => f.path).filter((f) => f.startsWith(ARTIFACT_FILES.weights));
    expect(dataFiles.length).toBeGreaterThan(3);
    const tokens = [1, 200, 3000, 45, 9000, 17, 33];
    const logits: Float32Array[] = [];
    for (const d of [one.dir, many.dir]) {
      const session = await TextSession.load(d, { threads: 2 });
      try {
        logits.push(await session.forward(0, 1, tokens.length, tokens));
      } finally {
        await session.release();
      }
    }
    expect(Buffer.from(logits[1].buffer).equals(Buffer.from(logits[0].buffer))).toBe(true);
  }, 120_000);

  it("loads in llama.cpp from its first shard, with the same outputs as the unsplit file", async () => {
    const llama = await getLlama({ gpu: false });
    const runs = makeRuns().slice(0, 2);
    const fromWhole = await llamaCppReference(llama, whole, runs, 256);
    const fromSet = await llamaCppReference(llama, shards[0], runs, 256);
    expect(fromSet).toEqual(fromWhole);
  }, 120_000);
});
