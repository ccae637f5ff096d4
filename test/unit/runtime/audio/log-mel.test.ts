import { describe, expect, it } from "vitest";
import { HOP_LENGTH, N_FFT, SAMPLE_RATE, WINDOW_FRAMES } from "../../../../src/runtime/artifact/speech-graph.js";
import { contentFrames, logMel, logMelAsync, melFrameCount, melWindow } from "../../../../src/runtime/audio/log-mel.js";
import { hzToMel, melFilterBank, melToHz } from "../../../../src/runtime/audio/mel-filters.js";

function tone(hz: number, seconds: number, amplitude = 0.5): Float32Array {
  return Float32Array.from({ length: Math.round(seconds * SAMPLE_RATE) }, (_, i) => amplitude * Math.sin((2 * Math.PI * hz * i) / SAMPLE_RATE));
}

describe("mel filters", () => {
  for (const bins of [80, 128]) {
    it(`has ${bins} Slaney triangles up to 8 kHz`, () => {
      const bank = melFilterBank(SAMPLE_RATE, N_FFT, bins);
      expect(bank).toHaveLength(bins);
      let previousPeak = -1;
      for (const { first, weights } of bank) {
        expect(weights.length).toBeGreaterThan(0);
        expect(first + weights.length).toBeLessThanOrEqual(N_FFT / 2 + 1);
        expect(Math.min(...weights)).toBeGreaterThanOrEqual(0);
        const peak = first + weights.indexOf(Math.max(...weights));
        expect(peak).toBeGreaterThanOrEqual(previousPeak);
        previousPeak = peak;
      }
    });
  }

  it("converts Hz and mel both ways (linear below 1 kHz, log above)", () => {
    expect(hzToMel(1000)).toBeCloseTo(15, 10);
    expect(hzToMel(8000)).toBeCloseTo(45.245640471924965, 10);
    for (const hz of [0, 200, 999, 1000, 4321, 8000]) expect(melToHz(hzToMel(hz))).toBeCloseTo(hz, 6);
  });

  it("weights low bins by the Slaney area normalization (2 / bandwidth)", () => {
    // Below 1 kHz the edges are 200/3 Hz * mel apart; the first triangle spans two such steps.
    const [first] = melFilterBank(SAMPLE_RATE, N_FFT, 80);
    const edges = [0, 1, 2].map((i) => melToHz((hzToMel(8000) * i) / 81));
    const peakWeight = Math.max(...first.weights);
    expect(peakWeight).toBeLessThanOrEqual(2 / (edges[2] - edges[0]) + 1e-9);
  });
});

describe("logMel", () => {
  it("has faster-whisper's frame count: floor(samples / 160) + 1", () => {
    for (const samples of [1, 159, 160, 161, 16000, 480000, 480001]) {
      expect(melFrameCount(samples)).toBe(Math.floor(samples / HOP_LENGTH) + 1);
    }
    const mel = logMel(tone(440, 1), 80);
    expect(mel.frames).toBe(101);
    expect(mel.data).toHaveLength(80 * 101);
    expect(contentFrames(mel)).toBe(100);
  });

  it("handles audio shorter than the FFT window", () => {
    const mel = logMel(tone(440, 0.001), 80);
    expect(mel.frames).toBe(1);
    expect(mel.data.every(Number.isFinite)).toBe(true);
  });

  it("puts a tone's energy in the mel bin around its frequency", () => {
    const mel = logMel(tone(1000, 1), 80);
    const bank = melFilterBank(SAMPLE_RATE, N_FFT, 80);
    const column = 50;
    const values = Array.from({ length: 80 }, (_, m) => mel.data[m * mel.frames + column]);
    const loudest = values.indexOf(Math.max(...values));
    const bin1k = Math.round((1000 * N_FFT) / SAMPLE_RATE);
    const { first, weights } = bank[loudest];
    expect(bin1k).toBeGreaterThanOrEqual(first);
    expect(bin1k).toBeLessThan(first + weights.length);
  });

  it("clamps to 8 decades below the global maximum and scales by (x + 4) / 4", () => {
    const mel = logMel(tone(300, 2), 128);
    const max = Math.max(...mel.data);
    const min = Math.min(...mel.data);
    expect(max - min).toBeLessThanOrEqual(2 + 1e-6);
    // Silence is clamped to exactly max - 2 after scaling.
    const silent = logMel(new Float32Array(3200), 80);
    expect(new Set(silent.data).size).toBe(1);
  });
});

describe("logMelAsync", () => {
  it("gives logMel's features in 30 s slices, and stops when aborted", async () => {
    const samples = Float32Array.from({ length: 16000 * 65 }, (_, i) => Math.sin(i / 7) * (i % 48000 < 24000 ? 0.5 : 0.01));
    const sync = logMel(samples, 80);
    const sliced = await logMelAsync(samples, 80);
    expect(sliced.frames).toBe(sync.frames);
    expect(Buffer.from(sliced.data.buffer).equals(Buffer.from(sync.data.buffer))).toBe(true);
    const abort = new AbortController();
    abort.abort(new Error("gone"));
    await expect(logMelAsync(samples, 80, abort.signal)).rejects.toThrow("gone");
  });
});

describe("melWindow", () => {
  it("copies 3000 content frames from the start frame and zero-pads the rest", () => {
    const mel = logMel(tone(500, 35), 80);
    expect(mel.frames).toBe(3501);
    const first = melWindow(mel, 80, 0);
    expect(first).toHaveLength(80 * WINDOW_FRAMES);
    expect(first[5 * WINDOW_FRAMES + 2999]).toBe(mel.data[5 * mel.frames + 2999]);
    const second = melWindow(mel, 80, 3000);
    // Content frames end at 3500 (the last feature frame is left out, as faster-whisper does).
    expect(second[7 * WINDOW_FRAMES + 499]).toBe(mel.data[7 * mel.frames + 3499]);
    expect(second[7 * WINDOW_FRAMES + 500]).toBe(0);
    expect(melWindow(mel, 80, 4000).every((v) => v === 0)).toBe(true);
  });

  it("rejects a shape that does not match", () => {
    const mel = logMel(tone(500, 1), 80);
    expect(() => melWindow(mel, 128, 0)).toThrow(RangeError);
    expect(() => melWindow(mel, 80, -1)).toThrow(RangeError);
  });
});
