import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ArtifactFolder, artifactId, sha256File } from "../../../src/compiler/artifact-writer.js";
import { type ArtifactManifest, readManifest, readTokenizerSpec, type TokenizerSpec } from "../../../src/runtime/artifact/index.js";
import { tempDir } from "./support.js";

const dir = tempDir("kiln-artifact-");
const SHA = "0123456789abcdef".repeat(4);
const OPTIONS = { accuracyLevel: 4, numerics: "fast" };

describe("artifactId", () => {
  it("is stable across releases: a changed scheme would orphan every compiled artifact", () => {
    // sha256("<sha>\n0.1.0\n{"accuracyLevel":4,"numerics":"fast"}"), first 12 hex digits, computed with Python's hashlib.
    expect(artifactId("smollm2", SHA, "0.1.0", OPTIONS)).toBe("smollm2-0a955e54caa0");
  });

  it("is the same for the same inputs and changes with each of source, compiler version and options", () => {
    const base = artifactId("m", SHA, "0.1.0", OPTIONS);
    expect(artifactId("m", SHA, "0.1.0", { ...OPTIONS })).toBe(base);
    const variants = [
      artifactId("m", SHA.replace(/^0/, "f"), "0.1.0", OPTIONS),
      artifactId("m", SHA, "0.1.1", OPTIONS),
      artifactId("m", SHA, "0.1.0", { ...OPTIONS, accuracyLevel: 0 }),
      artifactId("m", SHA, "0.1.0", { ...OPTIONS, numerics: "llama.cpp" }),
    ];
    expect(new Set([base, ...variants]).size).toBe(5);
    for (const id of [base, ...variants]) expect(id).toMatch(/^m-[0-9a-f]{12}$/);
  });

  it("keeps the slug as a readable prefix", () => {
    expect(artifactId("qwen2.5-0.5b-instruct", SHA, "0.1.0", {})).toMatch(/^qwen2\.5-0\.5b-instruct-[0-9a-f]{12}$/);
  });
});

describe("sha256File", () => {
  it("hashes a file's content", async () => {
    const path = join(dir, "abc.txt");
    writeFileSync(path, "abc");
    expect(await sha256File(path)).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });

  it("hashes files larger than one read chunk (4 MiB) the same as in one piece", async () => {
    const path = join(dir, "big.bin");
    const bytes = new Uint8Array((1 << 22) + 12345).map((_, i) => (i * 31) & 0xff);
    writeFileSync(path, bytes);
    const { createHash } = await import("node:crypto");
    expect(await sha256File(path)).toBe(createHash("sha256").update(bytes).digest("hex"));
  });
});

const SPEC: TokenizerSpec = {
  model: "gpt2",
  pre: "smollm",
  tokens: ["a", "b"],
  tokenTypes: [1, 3],
  merges: ["a b"],
  bosId: 0,
  eosId: 1,
  eotId: null,
  padId: null,
  unkId: null,
  addBos: false,
  addEos: false,
  addSpacePrefix: false,
};

function manifest(id: string): Omit<ArtifactManifest, "files"> {
  return {
    id,
    slug: "m",
    compilerVersion: "0.1.0",
    createdAt: "2025-01-01T00:00:00.000Z",
    source: { file: "m.gguf", sha256: SHA, bytes: 1 },
    shape: { architecture: "llama", layers: 1, hidden: 8, heads: 2, kvHeads: 1, headDim: 4, vocab: 2, contextLength: 16 },
    io: { inputs: ["input_ids"], outputs: ["logits"] },
    choices: [],
    stopTokenIds: [1],
  };
}

describe("ArtifactFolder", () => {
  it("builds in a temp folder and appears only on commit", async () => {
    const finalDir = join(dir, "commit", "m-1");
    const folder = new ArtifactFolder(finalDir);
    expect(folder.tmpDir).not.toBe(finalDir);
    expect(folder.path("model.onnx").startsWith(folder.tmpDir)).toBe(true);
    writeFileSync(folder.path("model.onnx"), "graph");
    folder.writeTokenizer(SPEC, "{{ messages }}");
    expect(existsSync(finalDir)).toBe(false);

    const committed = await folder.commit(manifest("m-1"));
    expect(existsSync(folder.tmpDir)).toBe(false);
    expect(readdirSync(finalDir).sort()).toEqual([".verified.json", "chat_template.jinja", "manifest.json", "model.onnx", "tokenizer.json"]);
    expect(readManifest(finalDir)).toEqual(committed);
    expect(committed).toEqual({ ...manifest("m-1"), files: expect.any(Array) });
    // Every file but the manifest, with its size and sha256.
    const { createHash } = await import("node:crypto");
    expect(committed.files).toEqual(
      ["chat_template.jinja", "model.onnx", "tokenizer.json"].map((name) => {
        const bytes = readFileSync(join(finalDir, name));
        return { path: name, bytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
      }),
    );
    expect(readTokenizerSpec(finalDir)).toEqual(SPEC);
    expect(readFileSync(join(finalDir, "chat_template.jinja"), "utf8")).toBe("{{ messages }}");
  });

  it("writes no chat template file when the model has none", async () => {
    const finalDir = join(dir, "no-template", "m-2");
    const folder = new ArtifactFolder(finalDir);
    folder.writeTokenizer(SPEC, null);
    await folder.commit(manifest("m-2"));
    expect(readdirSync(finalDir).sort()).toEqual([".verified.json", "manifest.json", "tokenizer.json"]);
  });

  it("replaces an existing artifact completely on a forced rebuild", async () => {
    const finalDir = join(dir, "replace", "m-3");
    mkdirSync(finalDir, { recursive: true });
    writeFileSync(join(finalDir, "stale.bin"), "old");
    const folder = new ArtifactFolder(finalDir);
    folder.writeTokenizer(SPEC, null);
    await folder.commit(manifest("m-3"));
    expect(readdirSync(finalDir).sort()).toEqual([".verified.json", "manifest.json", "tokenizer.json"]);
  });

  it("leaves nothing behind when abandoned, and clears a stale temp folder when started", () => {
    const finalDir = join(dir, "abandon", "m-4");
    const first = new ArtifactFolder(finalDir);
    writeFileSync(first.path("half-written"), "x");
    // A crashed earlier attempt by this process left its temp folder: a new one starts clean.
    const second = new ArtifactFolder(finalDir);
    expect(readdirSync(second.tmpDir)).toEqual([]);
    second.abandon();
    expect(existsSync(second.tmpDir)).toBe(false);
    expect(existsSync(finalDir)).toBe(false);
  });
});
