/**
 * `kiln models`' COMPILE column: whether this kiln can compile a model here, from the catalogue (or
 * the pulled file's header): architecture, weight types, disk; and whether it could be served.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { getModel } from "../../../src/catalogue/catalogue.js";
import type { ModelEntry } from "../../../src/catalogue/types.js";
import { assessCompilability, quantizationTag } from "../../../src/compiler/compilability.js";
import { GgmlType } from "../../../src/compiler/gguf/types.js";
import { meta, writeGguf } from "../../fixtures/gguf/write-gguf.js";

const GiB = 2 ** 30;
const roomy = { memoryBytes: 64 * GiB, freeDiskBytes: 500 * GiB };
const dir = mkdtempSync(join(tmpdir(), "kiln-compilability-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("compilability", () => {
  it("reads the quantization from a file name", () => {
    expect(quantizationTag("Llama-3.3-70B-Instruct-Q4_K_M.gguf")).toBe("Q4_K_M");
    expect(quantizationTag("SmolLM2-135M-Instruct.Q4_1.gguf")).toBe("Q4_1");
    expect(quantizationTag("Phi-3-mini-4k-instruct-q4.gguf")).toBe("Q4");
    expect(quantizationTag("Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00001-of-00002.gguf")).toBe("Q4_K_M");
  });

  it("says yes for a supported model that fits, with the weight types of its preset", async () => {
    const c = await assessCompilability(getModel("llama-3-2-1b-instruct"), { home: dir, machine: roomy });
    expect(c).toMatchObject({
      compilable: true,
      reasons: [],
      architecture: { name: "llama", supported: true },
      weightTypes: { types: ["Q4_K", "Q6_K", "F32"], unsupported: [], from: "file name" },
    });
    expect(c.sourceBytes).toBe(807_694_464);
    expect(c.memory.fitsToServe).toBe(true);
  });

  it("says no for an architecture without a graph builder, for a weight type without a mapping, and for a full disk", async () => {
    const base = getModel("llama-3-2-1b-instruct");
    const mamba: ModelEntry = { ...base, architecture: "mamba" };
    expect((await assessCompilability(mamba, { home: dir, machine: roomy })).reasons).toEqual(["no graph builder for mamba"]);

    const iq: ModelEntry = {
      ...base,
      sources: [{ type: "hub", repo: "o/r", revision: "main", format: "gguf", files: [{ path: "m-IQ2_XS.gguf", bytes: 1000 }] }],
    };
    expect((await assessCompilability(iq, { home: dir, machine: roomy })).reasons).toEqual(["unknown weight types"]);

    const full = await assessCompilability(getModel("llama-3-3-70b-instruct"), { home: dir, machine: { memoryBytes: 24 * GiB, freeDiskBytes: 40 * GiB } });
    expect(full.compilable).toBe(false);
    expect(full.reasons[0]).toMatch(/^needs \d+ GiB of disk, 40 GiB free$/);
    expect(full.memory.fitsToServe).toBe(false);
  });

  it("reads a pulled file's header: its real tensor types decide", async () => {
    const path = join(dir, "q3.gguf");
    await writeGguf(path, {
      metadata: [["general.architecture", meta.str("llama")]],
      tensors: [{ name: "blk.0.ffn_down.weight", dims: [256], type: GgmlType.Q3_K, data: new Uint8Array(110) }],
    });
    const c = await assessCompilability(getModel("llama-3-2-1b-instruct"), { home: dir, machine: roomy, pulledGguf: path });
    expect(c.compilable).toBe(false);
    expect(c.reasons).toEqual(["weight type Q3_K (tensor blk.0.ffn_down.weight)"]);
    expect(c.weightTypes.from).toBe("file header");

    const ok = join(dir, "q8.gguf");
    await writeGguf(ok, {
      metadata: [["general.architecture", meta.str("qwen2")]],
      tensors: [{ name: "w", dims: [32], type: GgmlType.Q8_0, data: new Uint8Array(34) }],
    });
    const good = await assessCompilability(getModel("llama-3-2-1b-instruct"), { home: dir, machine: roomy, pulledGguf: ok, pulledBytes: 807_694_464 });
    expect(good).toMatchObject({ compilable: true, architecture: { name: "qwen2", supported: true }, weightTypes: { types: ["Q8_0"], from: "file header" } });
    expect(good.disk.neededBytes).toBe(good.artifactBytes);
  });

  it("knows the speech compiler reads CTranslate2 conversions", async () => {
    const c = await assessCompilability(getModel("whisper-large-v3"), { home: dir, machine: roomy });
    expect(c).toMatchObject({ compilable: true, architecture: { name: "whisper", supported: true }, weightTypes: { types: ["ctranslate2"], from: "format" } });
  });
});
