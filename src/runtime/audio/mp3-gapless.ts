/**
 * An MP3's gapless length, read from the LAME tag in its first frame. The encoder adds silence at
 * both ends of the audio and records how much in that tag. ffmpeg drops the start's padding
 * whatever its input, but the end's only when it reads a file, not a pipe: an MP3 piped to a spare
 * ffmpeg comes out up to tens of milliseconds longer. Knowing the length ffmpeg gives from a file
 * lets an MP3 take the spare ffmpeg (no process start) and be cut to the same samples.
 */

/** libmp3lame's decoder delay, which ffmpeg adds to the tag's start padding and takes from its end padding. */
const DECODER_DELAY = 528 + 1;

/** Bytes of side information between a layer III frame's 4-byte header and its Xing/Info tag, by [MPEG-1?, mono?]. */
function sideInfoBytes(mpeg1: boolean, mono: boolean): number {
  if (mpeg1) return mono ? 17 : 32;
  return mono ? 9 : 17;
}

/** Sample rates by version bits (3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5) and rate index. */
const SAMPLE_RATES: Record<number, readonly number[]> = { 3: [44100, 48000, 32000], 2: [22050, 24000, 16000], 0: [11025, 12000, 8000] };

/** Encoders whose tag ffmpeg reads the padding from (the 9-byte version string's first four bytes). */
const PADDING_ENCODERS = new Set(["LAME", "Lavf", "Lavc"]);

const XING_FRAMES = 0x1;
const XING_BYTES = 0x2;
const XING_TOC = 0x4;
const XING_QUALITY = 0x8;

/** Where the first audio frame starts: after any ID3v2 tags (each 10 bytes of header, its size, and a 10-byte footer when flagged). */
function firstFrameOffset(bytes: Uint8Array): number {
  let at = 0;
  while (at + 10 <= bytes.length && bytes[at] === 0x49 && bytes[at + 1] === 0x44 && bytes[at + 2] === 0x33) {
    const size = ((bytes[at + 6] & 0x7f) << 21) | ((bytes[at + 7] & 0x7f) << 14) | ((bytes[at + 8] & 0x7f) << 7) | (bytes[at + 9] & 0x7f);
    at += 10 + size + (bytes[at + 5] & 0x10 ? 10 : 0);
  }
  return at;
}

/**
 * The number of samples at `outputRate` that ffmpeg's decoding of this MP3 from a file gives:
 * `Infinity` when it drops no end padding (no Xing/Info tag with a frame count and an encoder's
 * padding), `undefined` when the bytes do not start, after their ID3v2 tags, with a layer III frame
 * header (the caller then leaves the file to ffmpeg as a file).
 */
export function mp3GaplessLength(bytes: Uint8Array, outputRate: number): number | undefined {
  const at = firstFrameOffset(bytes);
  if (at + 4 > bytes.length) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const header = view.getUint32(at);
  const version = (header >>> 19) & 3;
  const layer = (header >>> 17) & 3;
  const bitrateIndex = (header >>> 12) & 15;
  const rateIndex = (header >>> 10) & 3;
  const syncs = header >>> 21 === 0x7ff;
  // Layer bits 01 are layer III; version 1, bitrate 15 and rate 3 are reserved.
  if (!syncs || version === 1 || layer !== 1 || bitrateIndex === 15 || rateIndex === 3) return undefined;
  const mpeg1 = version === 3;
  const mono = ((header >>> 6) & 3) === 3;
  const samplesPerFrame = mpeg1 ? 1152 : 576;
  const sampleRate = SAMPLE_RATES[version][rateIndex];

  let tag = at + 4 + sideInfoBytes(mpeg1, mono);
  const text = (from: number, length: number) => (from + length <= bytes.length ? String.fromCharCode(...bytes.subarray(from, from + length)) : "");
  if (text(tag, 4) !== "Xing" && text(tag, 4) !== "Info") return Infinity;
  if (tag + 8 > bytes.length) return Infinity;
  const flags = view.getUint32(tag + 4);
  if (!(flags & XING_FRAMES) || tag + 12 > bytes.length) return Infinity;
  const frames = view.getUint32(tag + 8);
  tag += 12;
  if (flags & XING_BYTES) tag += 4;
  if (flags & XING_TOC) tag += 100;
  if (flags & XING_QUALITY) tag += 4;
  // The LAME extension: a 9-byte encoder version, 12 bytes of other fields, then 12 bits of start padding and 12 of end padding.
  if (!PADDING_ENCODERS.has(text(tag, 4)) || tag + 24 > bytes.length || frames === 0) return Infinity;
  const paddings = (bytes[tag + 21] << 16) | (bytes[tag + 22] << 8) | bytes[tag + 23];
  const startPadding = paddings >>> 12;
  const endPadding = paddings & 0xfff;
  // ffmpeg skips start padding + decoder delay and stops at end padding - decoder delay before the frames' end (never past it).
  const sourceSamples = Math.max(0, frames * samplesPerFrame - startPadding - Math.max(endPadding, DECODER_DELAY));
  return sampleRate === outputRate ? sourceSamples : Math.ceil((sourceSamples * outputRate) / sampleRate);
}
