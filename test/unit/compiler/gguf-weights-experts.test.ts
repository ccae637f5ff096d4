/**
 * Stacked expert tensors ([K, N, experts] in ggml order): `linear` reads them as experts x N rows,
 * and `linearRows` reads one expert's rows alone; both must give what slicing the whole gives.
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GgufWeights } from "../../../src/compiler/gguf-weights.js";
import { readGguf } from "../../../src/compiler/gguf/reader.js";
import { GgmlType } from "../../../src/compiler/gguf/types.js";
import { sliceRows } from "../../../src/compiler/quant/linear-weight.js";
import { writeGguf } from "../../fixtures/gguf/write-gguf.js";
import { type EncodableType, encodeTensor } from "../../fixtures/synthetic/quantize.js";
import { Random } from "../../fixtures/synthetic/tiny-model.js";
import { tempDir } from "./gguf/helpers.js";

const TYPES: EncodableType[] = [GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.Q8_0, GgmlType.Q4_0, GgmlType.F16, GgmlType.F32];

describe("GgufWeights on stacked expert tensors", () => {
  it("reads each expert alone as the slice of the whole, for every type", async () => {
    const path = join(tempDir(), "experts.gguf");
    const rnd = new Random(6);
    const [k, n, experts] = [256, 24, 3];
    await writeGguf(path, {
      tensors: TYPES.map((type) => ({
        name: `exps.${GgmlType[type]}`,
        dims: [k, n, experts],
        type,
        data: encodeTensor(type, rnd.normals(k * n * experts, 0, 0.1)),
      })),
    });
    const weights = new GgufWeights(await readGguf(path));
    for (const type of TYPES) {
      const name = `exps.${GgmlType[type]}`;
      const whole = await weights.linear(name);
      expect(whole.n).toBe(n * experts);
      for (let e = 0; e < experts; e++) {
        const one = await weights.linearRows(name, e * n, n);
        expect(one, `${name} expert ${e}`).toEqual(sliceRows(whole, e * n, n));
      }
    }
    await expect(weights.linearRows("exps.Q4_K", 2 * n, n + 1)).rejects.toThrow(/rows 48\.\.73/);
  });
});
