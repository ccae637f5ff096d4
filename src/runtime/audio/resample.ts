/**
 * Sample-rate conversion that reproduces libswresample's default resampler, the one behind kiln's
 * ffmpeg command (`-ar 16000`) and faster-whisper's PyAV decoding: a polyphase bank of
 * Kaiser-windowed sinc filters (32 taps at the lower of the two rates, cutoff 0.97 of its Nyquist,
 * Kaiser beta 9), with one filter per output phase when the reduced rate ratio has at most 1024 of
 * them (swr's exact_rational mode), the start of the signal padded with its mirror image and the end
 * flushed with a shorter reflection. Following swr's choices where they change the samples (which
 * phase normalizes the bank, how long the filter is, how many samples the flush yields) keeps the
 * output within float32 rounding of ffmpeg's, so in-process decoding and ffmpeg give the same
 * transcription. Ratios that would need swr's approximate (non-exact) phase stepping are refused.
 */

/** swr's defaults: filter_size, 1 << phase_shift, kaiser_beta, cutoff. */
const FILTER_SIZE = 32;
const MAX_PHASES = 1 << 10;
const KAISER_BETA = 9;
const CUTOFF = 0.97;

/** One rate pair's filters, each `length` taps, row `phase` for an output `phase / phases` of an input sample past a whole one. */
interface PolyphaseBank {
  /** Output phases: the output rate divided by the two rates' greatest common divisor. */
  phases: number;
  /** Phases advanced per output sample: the input rate divided by that divisor. */
  step: number;
  /** Taps per filter. */
  length: number;
  /** `phases * length` coefficients, rounded to float32 as swr stores them for its float arithmetic. */
  taps: Float64Array;
}

/**
 * The highest input rate taken. The filter lengthens with the input rate (about 800 taps at 384 kHz),
 * and the bank with it; rates above the highest common one go to ffmpeg rather than let a header
 * ask for a bank of hundreds of megabytes.
 */
const MAX_RATE = 384_000;

/**
 * Recently used banks, most recent last. Building one takes up to a few tens of milliseconds (a
 * Bessel series per tap); keeping a handful covers the rates uploads actually use while bounding
 * the memory that uploads at many unusual rates could pin.
 */
const banks = new Map<string, PolyphaseBank>();
const KEPT_BANKS = 8;

function greatestCommonDivisor(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/**
 * Whether {@link resample} converts `from` Hz to `to` Hz: positive integer rates up to 384 kHz
 * whose reduced ratio has at most 1024 output phases (8, 11.025, 12, 22.05, 24, 32, 44.1, 48 and
 * 96 kHz to 16 kHz among them). More phases make swr step through a 1024-phase bank with a
 * fractional remainder, which this module does not reproduce.
 */
export function canResample(from: number, to: number): boolean {
  const valid = (rate: number) => Number.isSafeInteger(rate) && rate > 0 && rate <= MAX_RATE;
  return valid(from) && valid(to) && from !== to && to / greatestCommonDivisor(from, to) <= MAX_PHASES;
}

function bankFor(from: number, to: number): PolyphaseBank {
  const key = `${from}>${to}`;
  const bank = banks.get(key) ?? buildBank(from, to);
  banks.delete(key);
  banks.set(key, bank);
  if (banks.size > KEPT_BANKS) banks.delete(banks.keys().next().value!);
  return bank;
}

function buildBank(from: number, to: number): PolyphaseBank {
  const divisor = greatestCommonDivisor(from, to);
  const phases = to / divisor;
  // Downsampling narrows the passband below the output's Nyquist and lengthens the filter to match.
  const factor = Math.min((to * CUTOFF) / from, 1);
  let length = Math.max(Math.ceil(FILTER_SIZE / factor), 1);
  // swr rounds the length up to even so that phase p's filter is phase (phases - p)'s reversed.
  if (length > 1) length += length % 2;
  return { phases, step: from / divisor, length, taps: windowedSincBank(phases, length, factor) };
}

/** The zeroth-order modified Bessel function of the first kind, by its power series (converges for the window's arguments, at most beta). */
function besselI0(x: number): number {
  const quarterSquare = (x * x) / 4;
  let term = 1;
  let sum = 1;
  for (let k = 1; k < 500; k++) {
    term *= quarterSquare / (k * k);
    const next = sum + term;
    if (next === sum) break;
    sum = next;
  }
  return sum;
}

/**
 * The filter bank, computed in double and rounded to float32 per tap. Every phase is divided by the
 * sum of phase 0's taps, not its own, as swr does: the other phases' gains differ from 1 by a few
 * parts in a million, which is part of what ffmpeg outputs. For an even phase count swr computes
 * only the first half of the phases and mirrors the rest; so does this.
 */
function windowedSincBank(phases: number, length: number, factor: number): Float64Array {
  const taps = new Float64Array(phases * length);
  const center = (length - 1) >> 1;
  const computed = phases % 2 === 1 ? phases : phases / 2 + 1;
  const row = new Float64Array(length);
  let norm = 0;
  for (let phase = 0; phase < computed; phase++) {
    for (let i = 0; i < length; i++) {
      const x = Math.PI * (i - center - phase / phases) * factor;
      const sinc = x === 0 ? 1 : Math.sin(x) / x;
      const w = (2 * x) / (factor * length * Math.PI);
      row[i] = sinc * besselI0(KAISER_BETA * Math.sqrt(Math.max(1 - w * w, 0)));
      if (phase === 0) norm += row[i];
    }
    for (let i = 0; i < length; i++) taps[phase * length + i] = Math.fround(row[i] / norm);
    if (phases % 2 === 1 || phase === 0) continue;
    // In place for the middle phase (its own mirror), as swr copies it: the second half becomes the
    // first reversed, equal to what it held up to rounding.
    const mirror = phases - phase;
    for (let i = 0; i < length; i++) taps[mirror * length + length - 1 - i] = taps[phase * length + i];
  }
  return taps;
}

/** How many outputs swr produces while the last tap of each filter stays below `end` (input samples available, counting from the signal's start). */
function outputsBefore(end: number, bank: PolyphaseBank): number {
  const center = (bank.length - 1) >> 1;
  // Output j starts its filter at floor(j * step / phases) - center and needs `length` samples.
  const lastStart = end - bank.length + center;
  return lastStart < 0 ? 0 : Math.ceil(((lastStart + 1) * bank.phases) / bank.step);
}

/**
 * The number of input samples swr's flush appends (a reflection of the signal's end): half of what
 * is left in its input buffer, rounded up, that buffer being everything from the first filter it
 * could not yet apply. A signal shorter than one filter plus a sample never leaves swr's start-up
 * buffer, so the whole signal is what is left.
 */
function flushReflection(frames: number, bank: PolyphaseBank): number {
  if (frames < bank.length + 1) return (frames + 1) >> 1;
  const center = (bank.length - 1) >> 1;
  const pending = outputsBefore(frames, bank);
  const left = frames - (Math.floor((pending * bank.step) / bank.phases) - center);
  return (Math.min(left, bank.length) + 1) >> 1;
}

/**
 * The signal as swr's filters see it: `center` samples of its mirror image before it (x[-n] = x[n]),
 * then the signal, then `reflection` samples of its end reflected (x[N + k] = x[N - 1 - k]).
 */
function paddedSignal(input: Float32Array, center: number, reflection: number): Float64Array {
  const frames = input.length;
  const padded = new Float64Array(center + frames + reflection);
  padded.set(input, center);
  for (let k = 0; k < reflection; k++) padded[center + frames + k] = input[frames - 1 - k];
  // Mirrors after the end's reflection is in place: a signal shorter than `center` mirrors it too.
  for (let n = 1; n <= center; n++) padded[center - n] = padded[center + n];
  return padded;
}

/**
 * Resamples float samples from `from` Hz to `to` Hz as libswresample does by default, with the
 * output length ffmpeg gives (possibly zero for a signal shorter than about one filter). Each output
 * is summed in double and rounded to float32, within float32 rounding of swr's float arithmetic.
 * Throws when {@link canResample} is false.
 */
export function resample(input: Float32Array, from: number, to: number): Float32Array {
  if (!canResample(from, to)) throw new RangeError(`resampling from ${from} Hz to ${to} Hz is not supported in-process`);
  const bank = bankFor(from, to);
  const frames = input.length;
  if (frames === 0) return new Float32Array(0);
  const { phases, step, length, taps } = bank;
  const reflection = flushReflection(frames, bank);
  // swr waits for one filter plus a sample before it starts; a shorter signal, even with the flush's
  // reflection, yields nothing.
  if (frames < length + 1 && frames + reflection < length + 1) return new Float32Array(0);
  const center = (length - 1) >> 1;
  const signal = paddedSignal(input, center, reflection);
  const output = new Float32Array(outputsBefore(frames + reflection, bank));
  // Outputs j, j + phases, j + 2 phases and j + 3 phases use the same filter, `step` samples apart:
  // computing them together loads each tap once for four outputs, which makes the loop about a
  // third faster than one output at a time.
  const group = 4 * phases;
  for (let first = 0; first < output.length; first += group) {
    const last = Math.min(first + phases, output.length);
    for (let j = first; j < last; j++) {
      const position = j * step;
      const start = Math.floor(position / phases);
      const row = (position - start * phases) * length;
      if (j + 3 * phases < output.length) {
        dotFour(signal, start, step, taps, row, length, output, j, phases);
      } else {
        // The last group is cut short by the signal's end.
        for (let k = j, at = start; k < output.length; k += phases, at += step) output[k] = dot(signal, at, taps, row, length);
      }
    }
  }
  return output;
}

/** Σ signal[start + i] · taps[row + i] over `length` taps. */
function dot(signal: Float64Array, start: number, taps: Float64Array, row: number, length: number): number {
  let sum = 0;
  for (let i = 0; i < length; i++) sum += signal[start + i] * taps[row + i];
  return sum;
}

/** {@link dot} for four windows `stride` samples apart, into output[at], output[at + gap], output[at + 2 gap] and output[at + 3 gap]. */
function dotFour(
  signal: Float64Array,
  start: number,
  stride: number,
  taps: Float64Array,
  row: number,
  length: number,
  output: Float32Array,
  at: number,
  gap: number,
) {
  const s1 = start + stride;
  const s2 = s1 + stride;
  const s3 = s2 + stride;
  let a = 0;
  let b = 0;
  let c = 0;
  let d = 0;
  for (let i = 0; i < length; i++) {
    const tap = taps[row + i];
    a += signal[start + i] * tap;
    b += signal[s1 + i] * tap;
    c += signal[s2 + i] * tap;
    d += signal[s3 + i] * tap;
  }
  output[at] = a;
  output[at + gap] = b;
  output[at + 2 * gap] = c;
  output[at + 3 * gap] = d;
}
