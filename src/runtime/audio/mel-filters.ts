/**
 * Slaney-style mel filter bank (librosa's `mel(norm="slaney", htk=False)`), as Whisper and
 * faster-whisper's FeatureExtractor build it: triangles over FFT bins from 0 Hz to sr/2, linear
 * below 1 kHz and logarithmic above, each scaled to about constant energy. Stored sparsely, since
 * each triangle covers only a few of the 201 bins.
 */

/** One mel bin's triangle: weights for FFT bins first..first+weights.length-1. */
export interface MelFilter {
  first: number;
  weights: Float64Array;
}

/** Hz to Slaney mel scale (linear 200/3 Hz per mel below 1 kHz, log step ln(6.4)/27 above). */
export function hzToMel(hz: number): number {
  const fSp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fSp;
  const logStep = Math.log(6.4) / 27;
  return hz >= minLogHz ? minLogMel + Math.log(hz / minLogHz) / logStep : hz / fSp;
}

/** Inverse of {@link hzToMel}. */
export function melToHz(mel: number): number {
  const fSp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fSp;
  const logStep = Math.log(6.4) / 27;
  return mel >= minLogMel ? minLogHz * Math.exp(logStep * (mel - minLogMel)) : fSp * mel;
}

/**
 * The filter bank for `melBins` bins over an `nFft`-point FFT at `sampleRate`, up to sampleRate/2
 * (8 kHz for Whisper). Computed in float64, then rounded to float32 as faster-whisper stores it.
 */
export function melFilterBank(sampleRate: number, nFft: number, melBins: number): MelFilter[] {
  const bins = Math.floor(nFft / 2) + 1;
  const fftFreqs = Array.from({ length: bins }, (_, k) => (k * sampleRate) / nFft);
  const maxMel = hzToMel(sampleRate / 2);
  const edges = Array.from({ length: melBins + 2 }, (_, i) => melToHz((maxMel * i) / (melBins + 1)));
  const filters: MelFilter[] = [];
  for (let m = 0; m < melBins; m++) {
    const [lo, center, hi] = [edges[m], edges[m + 1], edges[m + 2]];
    const enorm = 2 / (hi - lo);
    const dense = fftFreqs.map((f) => Math.fround(Math.max(0, Math.min((f - lo) / (center - lo), (hi - f) / (hi - center))) * enorm));
    let first = dense.findIndex((w) => w > 0);
    if (first < 0) first = 0;
    let last = dense.length - 1;
    while (last > first && dense[last] === 0) last--;
    filters.push({ first, weights: Float64Array.from(dense.slice(first, last + 1)) });
  }
  return filters;
}
