import { GgmlType, type GgufFile } from "./gguf/types.js";
import { findTensor, getTensor, readTensorBytes, readTensorF32 } from "./gguf/reader.js";
import type { WeightSource } from "./graph/weights.js";
import type { LinearWeight } from "./quant/linear-weight.js";
import { floatLinear, repackQ4_0, repackQ4_1, repackQ4_K, repackQ6_K, repackQ8_0 } from "./quant/repack.js";

const REPACKERS: Partial<Record<GgmlType, (raw: Uint8Array, n: number, k: number) => LinearWeight>> = {
  [GgmlType.Q4_0]: repackQ4_0,
  [GgmlType.Q4_1]: repackQ4_1,
  [GgmlType.Q8_0]: repackQ8_0,
  [GgmlType.Q4_K]: repackQ4_K,
  [GgmlType.Q6_K]: repackQ6_K,
};

/** Weights read from a GGUF file; quantized blocks are repacked, float tensors become float matmuls. */
export class GgufWeights implements WeightSource {
  constructor(private readonly file: GgufFile) {}

  has(name: string): boolean {
    return findTensor(this.file, name) !== undefined;
  }

  dims(name: string): number[] {
    return getTensor(this.file, name).dims;
  }

  async floats(name: string): Promise<Float32Array> {
    return readTensorF32(this.file, getTensor(this.file, name));
  }

  async linear(name: string): Promise<LinearWeight> {
    const tensor = getTensor(this.file, name);
    const [k, n] = tensor.dims;
    const repack = REPACKERS[tensor.type];
    if (repack) return repack(await readTensorBytes(this.file, tensor), n, k);
    return floatLinear(await this.floats(name), n, k, GgmlType[tensor.type]);
  }
}
