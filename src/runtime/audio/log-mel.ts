/**
 * Whisper's log-mel features, computed as faster-whisper's FeatureExtractor (1.2.x) does so that the
 * encoder sees the same numbers: pad the audio with one hop of zeros, STFT (periodic Hann, n_fft 400,
 * hop 160, centered with reflect padding), drop the last frame, power spectrum, Slaney mel filters,
 * log10 floored at 1e-10, clamped to (global max - 8), then (x + 4) / 4.
 */
import { HOP_LENGTH, N_FFT, SAMPLE_RATE, WINDOW_FRAMES } from "../artifact/speech-graph.js";
import { RealFft } from "./fft.js";
import { type MelFilter, melFilterBank } from "./mel-filters.js";

/** Log-mel features: `data` is [melBins, frames] row-major. */
export interface LogMel {
  data: Float32Array;
  frames: number;
}

/** Zeros appended to the audio before the STFT: faster-whisper's `padding=160` default. */
const TAIL_PADDING = HOP_LENGTH;
/** Power floor before log10, and the dynamic range kept below the loudest value (8 decades). */
const POWER_FLOOR = 1e-10;
const DYNAMIC_RANGE = 8;

/** A filter bank in typed arrays: mel bin m weighs FFT bins first[m].. by weights[start[m]..start[m+1]). */
interface FlatFilterBank {
  first: Int32Array;
  start: Int32Array;
  weights: Float64Array;
}

const filterBanks = new Map<number, FlatFilterBank>();
let fft: RealFft | undefined;
let hann: Float64Array | undefined;

function filtersFor(melBins: number): FlatFilterBank {
  let bank = filterBanks.get(melBins);
  if (!bank) {
    bank = flatten(melFilterBank(SAMPLE_RATE, N_FFT, melBins));
    filterBanks.set(melBins, bank);
  }
  return bank;
}

function flatten(filters: MelFilter[]): FlatFilterBank {
  const start = new Int32Array(filters.length + 1);
  filters.forEach((f, m) => (start[m + 1] = start[m] + f.weights.length));
  const weights = new Float64Array(start[filters.length]);
  filters.forEach((f, m) => weights.set(f.weights, start[m]));
  return { first: Int32Array.from(filters, (f) => f.first), start, weights };
}

/** Periodic Hann window (numpy's hanning(n + 1)[:-1]), rounded to float32 as faster-whisper's is. */
function hannWindow(): Float64Array {
  hann ??= Float64Array.from({ length: N_FFT }, (_, i) => Math.fround(0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N_FFT)));
  return hann;
}

/** Mel frames faster-whisper produces for `samples` samples: one per hop after padding one hop, last dropped. */
export function melFrameCount(samples: number): number {
  return Math.floor((samples + TAIL_PADDING) / HOP_LENGTH);
}

/** Frames that hold audio: faster-whisper's `content_frames` (the feature count minus one). */
export function contentFrames(mel: LogMel): number {
  return Math.max(0, mel.frames - 1);
}

/** numpy's "reflect" padding index (mirror without repeating the edge), valid for any offset. */
function reflectIndex(i: number, length: number): number {
  if (length === 1) return 0;
  const period = 2 * (length - 1);
  let j = ((i % period) + period) % period;
  if (j >= length) j = period - j;
  return j;
}

/**
 * Mel power of every frame, [melBins, frames] row-major: each frame is windowed, transformed and
 * filtered at once, so the power spectrum never needs more than one frame's memory.
 */
function melPower(samples: Float32Array, frames: number, bank: FlatFilterBank, out: Float32Array, from = 0, to = frames): void {
  // Imported constants are live module bindings, checked on every read: hot loops use local copies.
  const nFft = N_FFT;
  const hop = HOP_LENGTH;
  const { first, start, weights } = bank;
  const transform = (fft ??= new RealFft(nFft));
  const window = hannWindow();
  const melBins = first.length;
  const frame = new Float64Array(nFft);
  const re = new Float64Array(transform.bins);
  const im = new Float64Array(transform.bins);
  const power = new Float64Array(transform.bins);
  const padded = samples.length + TAIL_PADDING;
  const half = nFft / 2;
  for (let t = from; t < to; t++) {
    const origin = t * hop - half;
    if (origin >= 0 && origin + nFft <= samples.length) {
      for (let i = 0; i < nFft; i++) frame[i] = samples[origin + i] * window[i];
    } else {
      for (let i = 0; i < nFft; i++) {
        // Centered STFT: reflect-pad the (tail-padded) signal by n_fft/2 on both sides.
        const j = reflectIndex(origin + i, padded);
        frame[i] = (j < samples.length ? samples[j] : 0) * window[i];
      }
    }
    transform.forward(frame, re, im);
    for (let k = 0; k < power.length; k++) power[k] = re[k] * re[k] + im[k] * im[k];
    for (let m = 0; m < melBins; m++) {
      let sum = 0;
      for (let w = start[m], k = first[m]; w < start[m + 1]; w++, k++) sum += weights[w] * power[k];
      out[m * frames + t] = sum;
    }
  }
}

/**
 * Whisper's log-mel features of the whole audio, [melBins, frames] row-major with
 * frames = floor(samples / 160) + 1 (faster-whisper's count). The max-8 clamp uses the maximum over
 * the whole file, as faster-whisper does, so windows cut from it with {@link melWindow} match it.
 */
export function logMel(samples: Float32Array, melBins: number): LogMel {
  const frames = melFrameCount(samples.length);
  const data = new Float32Array(melBins * frames);
  melPower(samples, frames, filtersFor(melBins), data);
  const max = toLog10(data, 0, data.length, -Infinity);
  clampAndScale(data, 0, data.length, max);
  return { data, frames };
}

/** Frames computed between two yields to the event loop: 30 s of audio, tens of milliseconds. */
const FRAMES_PER_SLICE = WINDOW_FRAMES;

/**
 * {@link logMel} in slices of 30 s that yield to the event loop between them, so a long upload
 * (an hour of audio is over a second of work) never stalls the server's other requests; the
 * signal stops it between slices.
 */
export async function logMelAsync(samples: Float32Array, melBins: number, signal?: AbortSignal): Promise<LogMel> {
  const frames = melFrameCount(samples.length);
  const data = new Float32Array(melBins * frames);
  const bank = filtersFor(melBins);
  for (let from = 0; from < frames; from += FRAMES_PER_SLICE) {
    melPower(samples, frames, bank, data, from, Math.min(frames, from + FRAMES_PER_SLICE));
    await yieldToEventLoop(signal);
  }
  const slice = melBins * FRAMES_PER_SLICE;
  let max = -Infinity;
  for (let from = 0; from < data.length; from += slice) {
    max = toLog10(data, from, Math.min(data.length, from + slice), max);
    await yieldToEventLoop(signal);
  }
  for (let from = 0; from < data.length; from += slice) clampAndScale(data, from, Math.min(data.length, from + slice), max);
  return { data, frames };
}

function yieldToEventLoop(signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) =>
    setImmediate(() => {
      if (signal?.aborted) reject(signal.reason);
      else resolve();
    }),
  );
}

/** log10 of the floored power in place over [from, to); returns the running maximum. */
function toLog10(data: Float32Array, from: number, to: number, max: number): number {
  for (let i = from; i < to; i++) {
    const value = Math.log10(Math.max(data[i], POWER_FLOOR));
    data[i] = value;
    if (value > max) max = value;
  }
  return max;
}

/** Keeps 8 decades below the loudest value, then Whisper's (x + 4) / 4 scaling, over [from, to). */
function clampAndScale(data: Float32Array, from: number, to: number, max: number): void {
  const floor = max - DYNAMIC_RANGE;
  for (let i = from; i < to; i++) data[i] = (Math.max(data[i], floor) + 4) / 4;
}

/**
 * One 30 s encoder window, [melBins, 3000] row-major, starting at mel frame `startFrame`: the content
 * frames (all but the last feature frame, as faster-whisper's transcribe slices them) from there,
 * then zeros, as faster-whisper's pad_or_trim pads the log-mel features.
 */
export function melWindow(mel: LogMel, melBins: number, startFrame: number): Float32Array {
  if (!Number.isInteger(startFrame) || startFrame < 0) throw new RangeError(`startFrame must be a non-negative integer, got ${startFrame}`);
  if (mel.data.length !== melBins * mel.frames) throw new RangeError(`mel data holds ${mel.data.length} values, not ${melBins} x ${mel.frames}`);
  const window = new Float32Array(melBins * WINDOW_FRAMES);
  const end = Math.min(startFrame + WINDOW_FRAMES, contentFrames(mel));
  if (end <= startFrame) return window;
  for (let m = 0; m < melBins; m++) {
    const from = m * mel.frames;
    window.set(mel.data.subarray(from + startFrame, from + end), m * WINDOW_FRAMES);
  }
  return window;
}
