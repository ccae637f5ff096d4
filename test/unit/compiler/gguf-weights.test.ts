/**
 * Large matrices are read and repacked a run of rows at a time (so a 70B model's LM head is never in
 * memory both raw and repacked): the result must equal repacking the whole tensor at once, for every
 * quantized type, whatever the chunk.
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgufWeights } from "../../../src/compiler/gguf-weights.js";
import { readGguf } from "../../../src/compiler/gguf/reader.js";
import { GgmlType } from "../../../src/compiler/gguf/types.js";
import { writeGguf } from "../../fixtures/gguf/write-gguf.js";
import { encodeTensor, type EncodableType } from "../../fixtures/synthetic/quantize.js";
import { Random } from "../../fixtures/synthetic/tiny-model.js";
import { tempDir } from "./gguf/helpers.js";

const QUANTIZED: EncodableType[] = [GgmlType.Q4_0, GgmlType.Q5_0, GgmlType.Q8_0, GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K];

describe("GgufWeights.linear in row chunks", () => {
  it("equals the whole-tensor repack for every quantized type and chunk size", async () => {
    const path = join(tempDir(), "rows.gguf");
    const rnd = new Random(5);
    const k = 512;
    const n = 11;
    await writeGguf(path, {
      tensors: QUANTIZED.map((type) => ({ name: `w.${GgmlType[type]}`, dims: [k, n], type, data: encodeTensor(type, rnd.normals(k * n, 0, 0.1)) })),
    });
    const file = await readGguf(path);
    const whole = new GgufWeights(file, { rowChunkBytes: Number.POSITIVE_INFINITY });
    for (const type of QUANTIZED) {
      const name = `w.${GgmlType[type]}`;
      const rowBytes = file.tensors.find((t) => t.name === name)!.byteLength / n;
      const reference = await whole.linear(name);
      for (const rowsPerChunk of [1, 3, 4, 10]) {
        const chunked = await new GgufWeights(file, { rowChunkBytes: rowsPerChunk * rowBytes }).linear(name);
        expect(chunked, `${name}, ${rowsPerChunk} rows a chunk`).toEqual(reference);
      }
    }
  });
});
