/**
 * How one GGUF weight matrix [N rows of K] becomes the operands of an ONNX matmul.
 *
 * `nbits` feeds com.microsoft MatMulNBits: `packed` is [N, K/block, block*bits/8] with element 2i
 * in the low nibble (4-bit), `scales` is [N, K/block], `zeroPoints` is packed uint8 or null for the
 * operator's default (8 for 4 bits, 128 for 8 bits). When `mins` is set ([K/block, N], row-major),
 * the block's value is q*scale + min: the graph adds blocksum(x) @ mins, which is exact and cheap,
 * because MatMulNBits only accepts integer zero points.
 *
 * `float` is a plain MatMul over the transposed matrix [K, N].
 */
export type LinearWeight =
  | {
      kind: "nbits";
      n: number;
      k: number;
      bits: 4 | 8;
      blockSize: number;
      packed: Uint8Array;
      scales: Float32Array;
      zeroPoints: Uint8Array | null;
      mins: Float32Array | null;
      /** How the source blocks map (for the manifest). */
      mapping: string;
      exact: boolean;
      activation?: ActivationType;
      /**
       * The input columns past the layer's own (k counts them): for each of `factors`, that factor
       * times the means of the input's `blocks` blocks of `blockSize`, appended by the graph (block
       * minimums folded by foldMinsToBlockMeans); k then need not be a multiple of blockSize.
       */
      blockMeans?: { blocks: number; factors: number[] };
    }
  | { kind: "float"; n: number; k: number; weightT: Float32Array; mapping: string; exact: boolean; activation?: ActivationType };

/** The MatMulNBits form of {@link LinearWeight}. */
export type NbitsWeight = Extract<LinearWeight, { kind: "nbits" }>;

/**
 * What llama.cpp's CPU matmul converts the activations to for this weight, where that is not the
 * default (Q8_0/Q8_1 32-blocks for 32-block `nbits`, float32 for `float`): Q8_K super-blocks for
 * K-quants, f16 or bf16 for half-precision float weights. Only "llama.cpp" numerics use it.
 */
export type ActivationType = "q8_K" | "f16" | "bf16";

/** Whether two weights can be concatenated along N into one fused matmul. */
export function fusable(a: LinearWeight, b: LinearWeight): boolean {
  if (a.kind !== b.kind || a.k !== b.k) return false;
  if (a.kind === "float" || b.kind === "float") return true;
  const bb = b as Extract<LinearWeight, { kind: "nbits" }>;
  return a.bits === bb.bits && a.blockSize === bb.blockSize && (a.mins === null) === (bb.mins === null) && (a.zeroPoints === null) === (bb.zeroPoints === null);
}

function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

function concatFloats(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Interleaves [rows, n_i] column blocks into [rows, sum n_i]. */
function concatColumns(parts: Float32Array[], ns: number[], rows: number): Float32Array {
  const total = ns.reduce((a, b) => a + b, 0);
  const out = new Float32Array(rows * total);
  for (let r = 0; r < rows; r++) {
    let col = 0;
    parts.forEach((p, i) => {
      out.set(p.subarray(r * ns[i], (r + 1) * ns[i]), r * total + col);
      col += ns[i];
    });
  }
  return out;
}

/** Stacks weights along N (output features), e.g. Q, K and V into one QKV matmul. */
export function concatRows(parts: LinearWeight[]): LinearWeight {
  const first = parts[0];
  if (!parts.every((p) => fusable(first, p))) throw new Error("concatRows: weights are not fusable");
  const n = parts.reduce((s, p) => s + p.n, 0);
  const mapping = parts[0].mapping;
  const exact = parts.every((p) => p.exact);
  if (first.kind === "float") {
    const ws = parts as Array<Extract<LinearWeight, { kind: "float" }>>;
    const weightT = concatColumns(
      ws.map((w) => w.weightT),
      ws.map((w) => w.n),
      first.k,
    );
    return { kind: "float", n, k: first.k, weightT, mapping, exact, ...(first.activation ? { activation: first.activation } : {}) };
  }
  const ws = parts as Array<Extract<LinearWeight, { kind: "nbits" }>>;
  const kBlocks = first.k / first.blockSize;
  // Zero points are packed per row (ceil(kBlocks/2) bytes for 4 bits), so rows concatenate cleanly.
  return {
    ...first,
    n,
    packed: concatBytes(ws.map((w) => w.packed)),
    scales: concatFloats(ws.map((w) => w.scales)),
    zeroPoints: first.zeroPoints ? concatBytes(ws.map((w) => w.zeroPoints!)) : null,
    mins: first.mins
      ? concatColumns(
          ws.map((w) => w.mins!),
          ws.map((w) => w.n),
          kBlocks,
        )
      : null,
    mapping,
    exact,
  };
}

/** Multiplies every output of a weight by a power of two (exact), e.g. folding 1/sqrt(head_dim) into Q. */
export function scaleRows(w: LinearWeight, factor: number, rowStart: number, rowEnd: number): void {
  if (w.kind === "float") {
    for (let kk = 0; kk < w.k; kk++) for (let r = rowStart; r < rowEnd; r++) w.weightT[kk * w.n + r] *= factor;
    return;
  }
  const kBlocks = w.k / w.blockSize;
  for (let r = rowStart; r < rowEnd; r++) for (let b = 0; b < kBlocks; b++) w.scales[r * kBlocks + b] *= factor;
  if (w.mins) for (let b = 0; b < kBlocks; b++) for (let r = rowStart; r < rowEnd; r++) w.mins[b * w.n + r] *= factor;
}

/**
 * Rows [start, start + count) of a weight (output features), sharing its buffers where the layout
 * allows: one expert's matrix out of a stacked expert tensor read as experts x N rows.
 */
export function sliceRows(w: LinearWeight, start: number, count: number): LinearWeight {
  if (start < 0 || count < 0 || start + count > w.n) throw new RangeError(`rows ${start}..${start + count} of a weight of ${w.n} rows`);
  if (w.kind === "float") {
    const weightT = new Float32Array(w.k * count);
    for (let kk = 0; kk < w.k; kk++) weightT.set(w.weightT.subarray(kk * w.n + start, kk * w.n + start + count), kk * count);
    return { ...w, n: count, weightT };
  }
  const kBlocks = w.k / w.blockSize;
  const rowBytes = (kBlocks * w.blockSize * w.bits) / 8;
  const zpRow = w.zeroPoints ? w.zeroPoints.length / w.n : 0;
  let mins: Float32Array | null = null;
  if (w.mins) {
    mins = new Float32Array(kBlocks * count);
    for (let b = 0; b < kBlocks; b++) mins.set(w.mins.subarray(b * w.n + start, b * w.n + start + count), b * count);
  }
  return {
    ...w,
    n: count,
    packed: w.packed.subarray(start * rowBytes, (start + count) * rowBytes),
    scales: w.scales.subarray(start * kBlocks, (start + count) * kBlocks),
    zeroPoints: w.zeroPoints ? w.zeroPoints.subarray(start * zpRow, (start + count) * zpRow) : null,
    mins,
  };
}

/** The stored integers of block `b` of row `row`, minus their zero point: value = u*scale (+ min). */
export function storedIntegers(w: NbitsWeight, row: number, b: number, u: Int32Array): void {
  const kBlocks = Math.ceil(w.k / w.blockSize);
  const blk = row * kBlocks + b;
  const zp = zeroPoint(w, row, b);
  if (w.bits === 8) {
    const base = blk * w.blockSize;
    for (let i = 0; i < w.blockSize; i++) u[i] = w.packed[base + i] - zp;
    return;
  }
  const base = (blk * w.blockSize) / 2;
  for (let i = 0; i < w.blockSize; i += 2) {
    const byte = w.packed[base + i / 2];
    u[i] = (byte & 0x0f) - zp;
    u[i + 1] = (byte >> 4) - zp;
  }
}

/** A block's zero point: packed per row (two per byte, low nibble first, for 4 bits), or the operator's default. */
export function zeroPoint(w: NbitsWeight, row: number, b: number): number {
  if (w.zeroPoints === null) return w.bits === 4 ? 8 : 128;
  const kBlocks = Math.ceil(w.k / w.blockSize);
  if (w.bits === 8) return w.zeroPoints[row * kBlocks + b];
  const byte = w.zeroPoints[row * Math.ceil(kBlocks / 2) + (b >> 1)];
  return b & 1 ? byte >> 4 : byte & 0x0f;
}
