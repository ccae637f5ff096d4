import { dequantize } from "./gguf/dequant.js";
import { GgmlType, type GgufFile, type GgufTensorInfo, ggmlByteLength } from "./gguf/types.js";
import { findTensor, getTensor, readTensorBytes, readTensorF32 } from "./gguf/reader.js";
import type { WeightSource } from "./graph/weights.js";
import type { LinearWeight } from "./quant/linear-weight.js";
import { floatLinear, repackQ4_0, repackQ4_1, repackQ4_K, repackQ5_0, repackQ5_K, repackQ6_K, repackQ8_0 } from "./quant/repack.js";

/** Float32 bytes per piece of a table read by rows (`floatRows`): small beside any model, large enough for few reads. */
const FLOAT_ROWS_CHUNK_BYTES = 64 << 20;

type Repacker = (raw: Uint8Array, n: number, k: number) => LinearWeight;
type NbitsWeight = Extract<LinearWeight, { kind: "nbits" }>;

export interface GgufWeightsOptions {
  /**
   * Quantized bytes read and repacked at a time for a matrix larger than this (default 64 MiB):
   * a 70B model's LM head (860 MB of Q6_K) is then never in memory both raw and repacked.
   */
  rowChunkBytes?: number;
}

const REPACKERS: Partial<Record<GgmlType, Repacker>> = {
  [GgmlType.Q4_0]: repackQ4_0,
  [GgmlType.Q4_1]: repackQ4_1,
  [GgmlType.Q5_0]: repackQ5_0,
  [GgmlType.Q8_0]: repackQ8_0,
  [GgmlType.Q4_K]: repackQ4_K,
  [GgmlType.Q5_K]: repackQ5_K,
  [GgmlType.Q6_K]: repackQ6_K,
};

/** Weights read from a GGUF file; quantized blocks are repacked, float tensors become float matmuls. */
export class GgufWeights implements WeightSource {
  private readonly rowChunkBytes: number;

  constructor(
    private readonly file: GgufFile,
    options: GgufWeightsOptions = {},
  ) {
    this.rowChunkBytes = options.rowChunkBytes ?? 64 << 20;
  }

  has(name: string): boolean {
    return findTensor(this.file, name) !== undefined;
  }

  dims(name: string): number[] {
    return getTensor(this.file, name).dims;
  }

  async floats(name: string): Promise<Float32Array> {
    return readTensorF32(this.file, getTensor(this.file, name));
  }

  /** The tensor dequantized to float32 a run of whole rows (of dims[0] elements) at a time, about `chunkBytes` of float32 each. */
  async *floatRows(name: string, chunkBytes = FLOAT_ROWS_CHUNK_BYTES): AsyncIterable<Float32Array> {
    const tensor = getTensor(this.file, name);
    const rowElements = tensor.dims[0] ?? 1;
    const rows = tensor.elementCount / rowElements;
    const rowBytes = ggmlByteLength(tensor.type, rowElements);
    const step = Math.max(1, Math.floor(chunkBytes / (rowElements * 4)));
    for (let row = 0; row < rows; row += step) {
      const n = Math.min(step, rows - row);
      yield dequantize(tensor.type, await readTensorBytes(this.file, tensor, row * rowBytes, n * rowBytes), n * rowElements);
    }
  }

  /** A stacked expert tensor [K, N, experts] reads as experts x N rows: expert e's matrix is rows e*N.. (see sliceRows). */
  async linear(name: string): Promise<LinearWeight> {
    const tensor = getTensor(this.file, name);
    const k = tensor.dims[0];
    const n = tensor.elementCount / k;
    const repack = REPACKERS[tensor.type];
    if (repack)
      return tensor.byteLength > this.rowChunkBytes ? this.repackInRows(tensor, repack, n, k) : repack(await readTensorBytes(this.file, tensor), n, k);
    return floatLinear(await this.floats(name), n, k, GgmlType[tensor.type]);
  }

  /** Rows [start, start + count) of `linear(name)`, only their bytes read (one expert of a stacked expert tensor). */
  async linearRows(name: string, start: number, count: number): Promise<LinearWeight> {
    const tensor = getTensor(this.file, name);
    const k = tensor.dims[0];
    const n = tensor.elementCount / k;
    if (start < 0 || count < 1 || start + count > n) throw new RangeError(`rows ${start}..${start + count} of "${name}", which has ${n}`);
    const rowBytes = tensor.byteLength / n;
    const raw = await readTensorBytes(this.file, tensor, start * rowBytes, count * rowBytes);
    const repack = REPACKERS[tensor.type];
    return repack ? repack(raw, count, k) : floatLinear(dequantize(tensor.type, raw, count * k), count, k, GgmlType[tensor.type]);
  }

  /**
   * A large matrix read and repacked a run of rows at a time into the whole weight's arrays: the
   * same result as repacking it whole, without its raw bytes in memory beside it.
   */
  private async repackInRows(tensor: GgufTensorInfo, repack: Repacker, n: number, k: number): Promise<LinearWeight> {
    const rowBytes = tensor.byteLength / n;
    const step = Math.max(1, Math.floor(this.rowChunkBytes / rowBytes));
    let whole: NbitsWeight | undefined;
    for (let row = 0; row < n; row += step) {
      const rows = Math.min(step, n - row);
      const part = repack(await readTensorBytes(this.file, tensor, row * rowBytes, rows * rowBytes), rows, k);
      if (part.kind !== "nbits") return repack(await readTensorBytes(this.file, tensor), n, k);
      whole ??= emptyLike(part, rows, n);
      placeRows(whole, part, row, rows);
    }
    return whole!;
  }
}

/** An n-row weight shaped like `part` (of `rows` rows), to be filled by {@link placeRows}. */
function emptyLike(part: NbitsWeight, rows: number, n: number): NbitsWeight {
  const per = (length: number) => (length / rows) * n;
  return {
    ...part,
    n,
    packed: new Uint8Array(per(part.packed.length)),
    scales: new Float32Array(per(part.scales.length)),
    zeroPoints: part.zeroPoints ? new Uint8Array(per(part.zeroPoints.length)) : null,
    mins: part.mins ? new Float32Array(per(part.mins.length)) : null,
  };
}

/** Copies `part` (rows first..first+rows) into `whole`: packed, scales and zero points are row-major, mins [K/block, N]. */
function placeRows(whole: NbitsWeight, part: NbitsWeight, first: number, rows: number): void {
  whole.packed.set(part.packed, (part.packed.length / rows) * first);
  whole.scales.set(part.scales, (part.scales.length / rows) * first);
  if (whole.zeroPoints && part.zeroPoints) whole.zeroPoints.set(part.zeroPoints, (part.zeroPoints.length / rows) * first);
  if (whole.mins && part.mins) {
    const kBlocks = part.mins.length / rows;
    for (let b = 0; b < kBlocks; b++) whole.mins.set(part.mins.subarray(b * rows, (b + 1) * rows), b * whole.n + first);
  }
}
