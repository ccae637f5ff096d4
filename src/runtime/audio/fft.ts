/**
 * Fast Fourier transforms for the speech front end: a mixed-radix complex FFT (radices 4, 2, 3, 5 and
 * a generic fallback, in the style of KISS FFT) and a real-input FFT of even length built on a complex
 * FFT of half the length. Whisper's STFT takes 3000 real FFTs of 400 points per 30 s of audio, so the
 * plans precompute every twiddle and the transforms allocate nothing per call.
 */

/** Splits n into the radices the butterflies handle: 4s first (fewest passes), then 2, 3, 5, then any prime. */
export function fftFactors(n: number): number[] {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`FFT length must be a positive integer, got ${n}`);
  const factors: number[] = [];
  let rest = n;
  for (const p of [4, 2, 3, 5]) {
    while (rest % p === 0) {
      factors.push(p);
      rest /= p;
    }
  }
  for (let p = 7; rest > 1; p += 2) {
    while (rest % p === 0) {
      factors.push(p);
      rest /= p;
    }
  }
  return factors;
}

/** A complex FFT of one length: X[k] = sum_j x[j] e^{-2 pi i jk/n}, unnormalized. */
export class ComplexFft {
  readonly n: number;
  private readonly factors: number[];
  /** e^{-2 pi i k/n} for k in 0..n-1. */
  private readonly twRe: Float64Array;
  private readonly twIm: Float64Array;
  /** Output position i starts as input permutation[i] (mixed-radix digit reversal). */
  private readonly permutation: Int32Array;
  /**
   * Butterfly passes, innermost first: radix p over blocks of p*m outputs; twiddles e^{-2 pi i rk/(pm)}
   * for k < m and r = 1..p-1 at wRe/wIm[k*(p-1) + r-1], so a pass reads them in order.
   */
  private readonly stages: Array<{ p: number; m: number; twStride: number; wRe: Float64Array; wIm: Float64Array }>;
  /** Scratch for the generic radix butterfly. */
  private readonly scratchRe: Float64Array;
  private readonly scratchIm: Float64Array;

  constructor(n: number) {
    this.n = n;
    this.factors = fftFactors(n);
    this.twRe = new Float64Array(n);
    this.twIm = new Float64Array(n);
    for (let k = 0; k < n; k++) {
      const phase = (-2 * Math.PI * k) / n;
      this.twRe[k] = Math.cos(phase);
      this.twIm[k] = Math.sin(phase);
    }
    this.permutation = new Int32Array(n);
    this.planPermutation(0, 1, 0, n, 0);
    this.stages = [];
    let stride = 1;
    for (const p of this.factors) {
      const m = n / (stride * p);
      const wRe = new Float64Array(m * (p - 1));
      const wIm = new Float64Array(m * (p - 1));
      for (let k = 0; k < m; k++) {
        for (let r = 1; r < p; r++) {
          wRe[k * (p - 1) + r - 1] = this.twRe[(r * k * stride) % n];
          wIm[k * (p - 1) + r - 1] = this.twIm[(r * k * stride) % n];
        }
      }
      this.stages.unshift({ p, m, twStride: stride, wRe, wIm });
      stride *= p;
    }
    const largest = Math.max(1, ...this.factors);
    this.scratchRe = new Float64Array(largest);
    this.scratchIm = new Float64Array(largest);
  }

  /** Transforms (inRe, inIm) into (outRe, outIm); the output arrays must not alias the input. */
  forward(inRe: Float64Array, inIm: Float64Array, outRe: Float64Array, outIm: Float64Array): void {
    const { n, permutation, stages } = this;
    if (inRe.length < n || inIm.length < n || outRe.length < n || outIm.length < n) {
      throw new RangeError(`FFT of ${n} points needs arrays of at least ${n}`);
    }
    for (let i = 0; i < n; i++) {
      const j = permutation[i];
      outRe[i] = inRe[j];
      outIm[i] = inIm[j];
    }
    for (const { p, m, twStride, wRe, wIm } of stages) {
      if (p === 4) this.butterfly4(outRe, outIm, m, wRe, wIm);
      else if (p === 2) this.butterfly2(outRe, outIm, m, wRe, wIm);
      else if (p === 5) this.butterfly5(outRe, outIm, m, wRe, wIm);
      else for (let offset = 0; offset < n; offset += p * m) this.butterflyGeneric(outRe, outIm, offset, m, p, twStride);
    }
  }

  /**
   * Decimation in time, unrolled once at planning: an FFT of n points at input offset/stride FFTs its
   * p interleaved subsequences into consecutive blocks of the output, then combines them in place.
   * Following that recursion down to single points gives where each input lands.
   */
  private planPermutation(inOffset: number, stride: number, outOffset: number, n: number, level: number): void {
    if (n === 1) {
      this.permutation[outOffset] = inOffset;
      return;
    }
    const p = this.factors[level];
    const m = n / p;
    for (let r = 0; r < p; r++) this.planPermutation(inOffset + r * stride, stride * p, outOffset + r * m, m, level + 1);
  }

  /** Radix-2 pass over every block of 2*m values, with the stage's twiddles (wRe, wIm). */
  private butterfly2(re: Float64Array, im: Float64Array, m: number, wRe: Float64Array, wIm: Float64Array): void {
    const n = this.n;
    for (let offset = 0; offset < n; offset += 2 * m)
      for (let k = 0; k < m; k++) {
        const a = offset + k;
        const b = a + m;
        const wr = wRe[k];
        const wi = wIm[k];
        const tr = re[b] * wr - im[b] * wi;
        const ti = re[b] * wi + im[b] * wr;
        re[b] = re[a] - tr;
        im[b] = im[a] - ti;
        re[a] += tr;
        im[a] += ti;
      }
  }

  /** Radix-4 pass over every block of 4*m values, with the stage's twiddles (wRe, wIm). */
  private butterfly4(re: Float64Array, im: Float64Array, m: number, wRe: Float64Array, wIm: Float64Array): void {
    const n = this.n;
    for (let offset = 0; offset < n; offset += 4 * m)
      for (let k = 0; k < m; k++) {
        const i0 = offset + k;
        const i1 = i0 + m;
        const i2 = i1 + m;
        const i3 = i2 + m;
        const w1 = 3 * k;
        const w2 = w1 + 1;
        const w3 = w1 + 2;
        const x0r = re[i0],
          x0i = im[i0];
        const x1r = re[i1] * wRe[w1] - im[i1] * wIm[w1];
        const x1i = re[i1] * wIm[w1] + im[i1] * wRe[w1];
        const x2r = re[i2] * wRe[w2] - im[i2] * wIm[w2];
        const x2i = re[i2] * wIm[w2] + im[i2] * wRe[w2];
        const x3r = re[i3] * wRe[w3] - im[i3] * wIm[w3];
        const x3i = re[i3] * wIm[w3] + im[i3] * wRe[w3];
        const s02r = x0r + x2r,
          s02i = x0i + x2i;
        const d02r = x0r - x2r,
          d02i = x0i - x2i;
        const s13r = x1r + x3r,
          s13i = x1i + x3i;
        const d13r = x1r - x3r,
          d13i = x1i - x3i;
        re[i0] = s02r + s13r;
        im[i0] = s02i + s13i;
        re[i2] = s02r - s13r;
        im[i2] = s02i - s13i;
        // Forward transform: multiply (x1 - x3) by -i for X[k+m], by +i for X[k+3m].
        re[i1] = d02r + d13i;
        im[i1] = d02i - d13r;
        re[i3] = d02r - d13i;
        im[i3] = d02i + d13r;
      }
  }

  /** Radix-5 pass over every block of 5*m values, with the stage's twiddles (wRe, wIm). */
  private butterfly5(re: Float64Array, im: Float64Array, m: number, wRe: Float64Array, wIm: Float64Array): void {
    const n = this.n;
    // e^{-2 pi i/5} and e^{-4 pi i/5}.
    const c1 = Math.cos((2 * Math.PI) / 5),
      s1 = -Math.sin((2 * Math.PI) / 5);
    const c2 = Math.cos((4 * Math.PI) / 5),
      s2 = -Math.sin((4 * Math.PI) / 5);
    for (let offset = 0; offset < n; offset += 5 * m)
      for (let k = 0; k < m; k++) {
        const i0 = offset + k,
          i1 = i0 + m,
          i2 = i1 + m,
          i3 = i2 + m,
          i4 = i3 + m;
        const w1 = 4 * k,
          w2 = w1 + 1,
          w3 = w1 + 2,
          w4 = w1 + 3;
        const x0r = re[i0],
          x0i = im[i0];
        const x1r = re[i1] * wRe[w1] - im[i1] * wIm[w1],
          x1i = re[i1] * wIm[w1] + im[i1] * wRe[w1];
        const x2r = re[i2] * wRe[w2] - im[i2] * wIm[w2],
          x2i = re[i2] * wIm[w2] + im[i2] * wRe[w2];
        const x3r = re[i3] * wRe[w3] - im[i3] * wIm[w3],
          x3i = re[i3] * wIm[w3] + im[i3] * wRe[w3];
        const x4r = re[i4] * wRe[w4] - im[i4] * wIm[w4],
          x4i = re[i4] * wIm[w4] + im[i4] * wRe[w4];
        const a14r = x1r + x4r,
          a14i = x1i + x4i,
          d14r = x1r - x4r,
          d14i = x1i - x4i;
        const a23r = x2r + x3r,
          a23i = x2i + x3i,
          d23r = x2r - x3r,
          d23i = x2i - x3i;
        re[i0] = x0r + a14r + a23r;
        im[i0] = x0i + a14i + a23i;
        // Real parts of the symmetric sums, then i*(sine terms) of the antisymmetric ones.
        const p1r = x0r + c1 * a14r + c2 * a23r,
          p1i = x0i + c1 * a14i + c2 * a23i;
        const q1r = -(s1 * d14i + s2 * d23i),
          q1i = s1 * d14r + s2 * d23r;
        const p2r = x0r + c2 * a14r + c1 * a23r,
          p2i = x0i + c2 * a14i + c1 * a23i;
        const q2r = -(s2 * d14i - s1 * d23i),
          q2i = s2 * d14r - s1 * d23r;
        re[i1] = p1r + q1r;
        im[i1] = p1i + q1i;
        re[i4] = p1r - q1r;
        im[i4] = p1i - q1i;
        re[i2] = p2r + q2r;
        im[i2] = p2i + q2i;
        re[i3] = p2r - q2r;
        im[i3] = p2i - q2i;
      }
  }

  private butterflyGeneric(re: Float64Array, im: Float64Array, offset: number, m: number, p: number, twStride: number): void {
    const { twRe, twIm, scratchRe, scratchIm, n } = this;
    for (let k = 0; k < m; k++) {
      for (let r = 0; r < p; r++) {
        scratchRe[r] = re[offset + k + r * m];
        scratchIm[r] = im[offset + k + r * m];
      }
      for (let q = 0; q < p; q++) {
        let sr = 0,
          si = 0;
        const out = k + q * m;
        for (let r = 0; r < p; r++) {
          // e^{-2 pi i r(k + qm)/(pm)} from the table, whose unit is 1/N.
          const t = (r * out * twStride) % n;
          sr += scratchRe[r] * twRe[t] - scratchIm[r] * twIm[t];
          si += scratchRe[r] * twIm[t] + scratchIm[r] * twRe[t];
        }
        re[offset + out] = sr;
        im[offset + out] = si;
      }
    }
  }
}

/**
 * FFT of n real samples (n even), giving the n/2 + 1 non-redundant bins. It packs even and odd
 * samples as one complex signal of n/2 points, transforms that, and untangles the two halves.
 */
export class RealFft {
  readonly n: number;
  readonly bins: number;
  private readonly half: ComplexFft;
  private readonly packRe: Float64Array;
  private readonly packIm: Float64Array;
  private readonly zRe: Float64Array;
  private readonly zIm: Float64Array;
  /** e^{-2 pi i k/n} for k in 0..n/2. */
  private readonly twRe: Float64Array;
  private readonly twIm: Float64Array;

  constructor(n: number) {
    if (!Number.isInteger(n) || n < 2 || n % 2 !== 0) throw new RangeError(`real FFT length must be even, got ${n}`);
    this.n = n;
    this.bins = n / 2 + 1;
    const h = n / 2;
    this.half = new ComplexFft(h);
    this.packRe = new Float64Array(h);
    this.packIm = new Float64Array(h);
    this.zRe = new Float64Array(h);
    this.zIm = new Float64Array(h);
    this.twRe = new Float64Array(h + 1);
    this.twIm = new Float64Array(h + 1);
    for (let k = 0; k <= h; k++) {
      this.twRe[k] = Math.cos((-2 * Math.PI * k) / n);
      this.twIm[k] = Math.sin((-2 * Math.PI * k) / n);
    }
  }

  /** Writes bins 0..n/2 of the FFT of `input` (first n values) to outRe/outIm. */
  forward(input: ArrayLike<number>, outRe: Float64Array, outIm: Float64Array): void {
    const h = this.n / 2;
    const { packRe, packIm, zRe, zIm, twRe, twIm } = this;
    for (let j = 0; j < h; j++) {
      packRe[j] = input[2 * j];
      packIm[j] = input[2 * j + 1];
    }
    this.half.forward(packRe, packIm, zRe, zIm);
    for (let k = 0; k <= h; k++) {
      // E = (Z[k] + conj Z[h-k]) / 2 is the even samples' FFT, O = (Z[k] - conj Z[h-k]) / 2i the odd ones'.
      const a = k % h;
      const b = (h - k) % h;
      const er = (zRe[a] + zRe[b]) / 2,
        ei = (zIm[a] - zIm[b]) / 2;
      const or = (zIm[a] + zIm[b]) / 2,
        oi = -(zRe[a] - zRe[b]) / 2;
      outRe[k] = er + or * twRe[k] - oi * twIm[k];
      outIm[k] = ei + or * twIm[k] + oi * twRe[k];
    }
  }
}
