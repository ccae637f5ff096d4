/**
 * Word timing from cross-attention (openai-whisper's `find_alignment`): the alignment heads'
 * attention of each text token over the audio frames, normalized per head, median-filtered along
 * time, averaged over heads, then a monotonic path by dynamic time warping. A token starts where the
 * path first reaches its row.
 */
import { TIME_PRECISION } from "../artifact/index.js";

/** Width of the median filter along the frames axis. */
const MEDIAN_WIDTH = 7;

/**
 * Start time (seconds) of each row of `weights` [heads, rows, audioCtx]: rows are the text tokens
 * then <|endoftext|>, whose start is the last token's end. `frames` is the window's real audio in
 * mel frames; only its attention frames (frames / 2) count.
 */
export function alignRows(weights: Float32Array, heads: number, rows: number, audioCtx: number, frames: number): number[] {
  const cols = Math.max(1, Math.min(audioCtx, Math.floor(frames / 2)));
  const matrix = new Float64Array(rows * cols);
  for (let h = 0; h < heads; h++) {
    const head = normalizedHead(weights, h, rows, audioCtx, cols);
    for (let r = 0; r < rows; r++) {
      const filtered = medianFilter(head.subarray(r * cols, (r + 1) * cols), MEDIAN_WIDTH);
      for (let c = 0; c < cols; c++) matrix[r * cols + c] += filtered[c] / heads;
    }
  }
  const path = dtw(matrix, rows, cols);
  const starts: number[] = [];
  let lastRow = -1;
  for (const [r, c] of path) {
    if (r !== lastRow) starts.push(c * TIME_PRECISION);
    lastRow = r;
  }
  return starts;
}

/** One head's weights over the first `cols` frames, renormalized per row, then standardized per frame over rows. */
function normalizedHead(weights: Float32Array, h: number, rows: number, audioCtx: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const base = (h * rows + r) * audioCtx;
    let sum = 0;
    for (let c = 0; c < cols; c++) sum += weights[base + c];
    for (let c = 0; c < cols; c++) out[r * cols + c] = sum > 0 ? weights[base + c] / sum : 0;
  }
  for (let c = 0; c < cols; c++) {
    let mean = 0;
    for (let r = 0; r < rows; r++) mean += out[r * cols + c];
    mean /= rows;
    let variance = 0;
    for (let r = 0; r < rows; r++) variance += (out[r * cols + c] - mean) ** 2;
    const std = Math.sqrt(variance / rows) || 1;
    for (let r = 0; r < rows; r++) out[r * cols + c] = (out[r * cols + c] - mean) / std;
  }
  return out;
}

/** Median over a sliding window with reflected edges (as torch's reflect padding). */
export function medianFilter(x: ArrayLike<number>, width: number): Float64Array {
  const n = x.length;
  const half = Math.floor(width / 2);
  const out = new Float64Array(n);
  if (n <= half) {
    for (let i = 0; i < n; i++) out[i] = x[i];
    return out;
  }
  const window = new Float64Array(width);
  const reflect = (i: number) => (i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i);
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < width; k++) window[k] = x[reflect(i - half + k)];
    window.sort();
    out[i] = window[half];
  }
  return out;
}

/** Dynamic time warping over -matrix: the monotonic (row, col) path of least cost from (0,0) to the end. */
export function dtw(matrix: Float64Array, rows: number, cols: number): Array<[number, number]> {
  const cost = new Float64Array((rows + 1) * (cols + 1)).fill(Infinity);
  const trace = new Int8Array((rows + 1) * (cols + 1)).fill(-1);
  const at = (i: number, j: number) => i * (cols + 1) + j;
  cost[0] = 0;
  for (let j = 1; j <= cols; j++) {
    for (let i = 1; i <= rows; i++) {
      const c0 = cost[at(i - 1, j - 1)];
      const c1 = cost[at(i - 1, j)];
      const c2 = cost[at(i, j - 1)];
      let c = c0;
      let t = 0;
      if (c1 < c) ((c = c1), (t = 1));
      if (c2 < c) ((c = c2), (t = 2));
      cost[at(i, j)] = -matrix[(i - 1) * cols + (j - 1)] + c;
      trace[at(i, j)] = t;
    }
  }
  const path: Array<[number, number]> = [];
  let i = rows;
  let j = cols;
  while (i > 0 && j > 0) {
    path.push([i - 1, j - 1]);
    const t = trace[at(i, j)];
    if (t === 0) ((i -= 1), (j -= 1));
    else if (t === 1) i -= 1;
    else j -= 1;
  }
  return path.reverse();
}
