/** What a speech session keeps on a GPU, counted before it allocates, and the refusal when it cannot fit. */
import { describe, expect, it } from "vitest";
import type { SpeechArtifactManifest } from "../../../../src/runtime/artifact/index.js";
import { AdapterMemoryError, checkAdapterRoom, speechDeviceBytes, totalBytes } from "../../../../src/runtime/speech-worker/device-room.js";

const GIB = 2 ** 30;
/** Whisper large-v3's shape, its weights as the float32 GPU artifact's two files. */
const largeV3 = {
  id: "whisper-large-v3-0123456789ab",
  files: [
    { path: "encoder.onnx.data", bytes: 2.5 * GIB },
    { path: "decoder.onnx.data", bytes: 3.7 * GIB },
  ],
  speech: { melBins: 128, audioContext: 1500, textContext: 448, width: 1280, heads: 20, headDim: 64, encoderLayers: 32, decoderLayers: 32, vocab: 51866 },
} as unknown as SpeechArtifactManifest;

describe("speechDeviceBytes", () => {
  it("counts the weights, a decoder cache of the whole text context per slot, a window per run of slots and the encoder's attention over a window", () => {
    // 4 transcriptions at beam 5: 20 slots, 4 windows.
    const b = speechDeviceBytes(largeV3, 20, 5, "float32");
    expect(b.weights).toBe(6.2 * GIB);
    // keys and values x 32 layers x 20 slots x (448 + 1) positions x 1280 x 4 bytes: about 2.9 GB.
    expect(b.decoderCache).toBe(2 * 32 * 20 * 449 * 1280 * 4);
    // keys and values x 32 layers x 4 windows x 1500 positions x 1280 x 4 bytes: about 2 GB.
    expect(b.windows).toBe(2 * 32 * 4 * 1500 * 1280 * 4);
    // scores and probabilities of 20 heads over 1500 x 1500 positions.
    expect(b.encoderWork).toBe(2 * 20 * 1500 * 1500 * 4);
    expect(totalBytes(b)).toBe(b.weights + b.decoderCache + b.windows + b.encoderWork);
  });

  it("halves every cache in float16", () => {
    const full = speechDeviceBytes(largeV3, 20, 5, "float32");
    const half = speechDeviceBytes(largeV3, 20, 5, "float16");
    expect([half.decoderCache * 2, half.windows * 2, half.encoderWork * 2]).toEqual([full.decoderCache, full.windows, full.encoderWork]);
  });
});

describe("checkAdapterRoom", () => {
  it("passes a session that fits the free memory, and refuses one that does not with every part and what to change", () => {
    const needed = speechDeviceBytes(largeV3, 20, 5, "float32");
    expect(() => checkAdapterRoom(largeV3.id, needed, totalBytes(needed), 20, 5, "float32")).not.toThrow();
    let error: unknown;
    try {
      checkAdapterRoom(largeV3.id, needed, 8 * GIB, 20, 5, "float32");
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(AdapterMemoryError);
    expect((error as Error).message).toBe(
      "whisper-large-v3-0123456789ab needs about 11.1 GiB of the adapter's memory (weights 6.2 GiB, decoder cache 2.7 GiB for 20 rows, windows 1.8 GiB for 4 transcriptions, " +
        "encoder 0.34 GiB) and 8.0 GiB are free: decode fewer transcriptions or beams at once, or load the float16 GPU artifact (half of every part)",
    );
  });

  it("does not suggest the float16 artifact to one already in float16", () => {
    const needed = speechDeviceBytes(largeV3, 20, 5, "float16");
    expect(() => checkAdapterRoom(largeV3.id, needed, GIB, 20, 5, "float16")).toThrow(/ are free: decode fewer transcriptions or beams at once$/);
  });
});
