import { describe, expect, it } from "vitest";
import { mp3GaplessLength } from "../../../../src/runtime/audio/mp3-gapless.js";

interface FrameSpec {
  /** The frame header's four bytes. Default: MPEG-2 layer III, 22.05 kHz, mono (what ffmpeg writes for a 22.05 kHz mono MP3). */
  header?: number[];
  /** Side-information bytes before the tag. Default: 9 (MPEG-2 mono). */
  sideInfo?: number;
  tag?: "Info" | "Xing" | "none";
  flags?: number;
  frames?: number;
  encoder?: string;
  startPadding?: number;
  endPadding?: number;
  /** ID3v2 tags before the frame: their body sizes, each with a footer when `footer`. */
  id3?: { size: number; footer?: boolean }[];
}

/** An MP3's first bytes: ID3v2 tags, then a frame header, its side information and a Xing/Info tag with a LAME extension. */
function mp3Start(spec: FrameSpec = {}): Uint8Array {
  const out: number[] = [];
  for (const { size, footer } of spec.id3 ?? []) {
    out.push(0x49, 0x44, 0x33, 4, 0, footer ? 0x10 : 0, (size >> 21) & 0x7f, (size >> 14) & 0x7f, (size >> 7) & 0x7f, size & 0x7f);
    out.push(...new Array<number>(size + (footer ? 10 : 0)).fill(0));
  }
  out.push(...(spec.header ?? [0xff, 0xf3, 0x80, 0xc0]), ...new Array<number>(spec.sideInfo ?? 9).fill(0));
  if (spec.tag === "none") return Uint8Array.from([...out, ...new Array<number>(200).fill(0)]);
  const u32 = (v: number) => [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
  const flags = spec.flags ?? 0x0f;
  out.push(...Array.from(spec.tag ?? "Info", (c) => c.charCodeAt(0)), ...u32(flags));
  if (flags & 1) out.push(...u32(spec.frames ?? 147));
  if (flags & 2) out.push(...u32(9408));
  if (flags & 4) out.push(...new Array<number>(100).fill(7));
  if (flags & 8) out.push(...u32(0));
  out.push(...Array.from((spec.encoder ?? "Lavc59.37").padEnd(9, " "), (c) => c.charCodeAt(0)), ...new Array<number>(12).fill(0));
  const paddings = ((spec.startPadding ?? 576) << 12) | (spec.endPadding ?? 919);
  out.push((paddings >> 16) & 255, (paddings >> 8) & 255, paddings & 255, ...new Array<number>(40).fill(0));
  return Uint8Array.from(out);
}

describe("mp3GaplessLength", () => {
  it("gives the length ffmpeg decodes from a file: frames less both paddings, at the output rate", () => {
    // Measured with ffmpeg 5.1 on such a file (147 frames of 576 samples at 22.05 kHz): 60,356 samples at 16 kHz.
    expect(mp3GaplessLength(mp3Start(), 16_000)).toBe(60_356);
    expect(mp3GaplessLength(mp3Start(), 22_050)).toBe(147 * 576 - 576 - 919);
    expect(mp3GaplessLength(mp3Start({ id3: [{ size: 35 }] }), 16_000)).toBe(60_356);
    expect(mp3GaplessLength(mp3Start({ id3: [{ size: 3, footer: true }, { size: 20 }] }), 16_000)).toBe(60_356);
  });

  it("reads the tag where MPEG-1 stereo puts it, with 1,152 samples a frame", () => {
    // MPEG-1 layer III, 44.1 kHz, joint stereo: 32 bytes of side information.
    const start = mp3Start({ header: [0xff, 0xfb, 0x50, 0x44], sideInfo: 32, frames: 54, startPadding: 576, endPadding: 1215 });
    expect(mp3GaplessLength(start, 16_000)).toBe(21_920);
    expect(mp3GaplessLength(mp3Start({ header: [0xff, 0xfb, 0x50, 0x44], sideInfo: 17, frames: 54 }), 16_000)).toBe(Infinity);
  });

  it("never cuts into the frames' decoder delay: an end padding under 529 samples drops 529", () => {
    expect(mp3GaplessLength(mp3Start({ endPadding: 100 }), 22_050)).toBe(147 * 576 - 576 - 529);
  });

  it("drops nothing where ffmpeg reads no padding", () => {
    expect(mp3GaplessLength(mp3Start({ tag: "none" }), 16_000)).toBe(Infinity);
    expect(mp3GaplessLength(mp3Start({ encoder: "FhG" }), 16_000)).toBe(Infinity);
    expect(mp3GaplessLength(mp3Start({ flags: 0x0e }), 16_000)).toBe(Infinity);
    expect(mp3GaplessLength(mp3Start({ frames: 0 }), 16_000)).toBe(Infinity);
    expect(mp3GaplessLength(mp3Start({ tag: "Xing", flags: 0x01 }), 22_050)).toBe(147 * 576 - 576 - 919);
  });

  it("leaves to a file what does not start with a layer III frame after its tags", () => {
    expect(mp3GaplessLength(mp3Start({ header: [0xff, 0xf1, 0x50, 0x80] }), 16_000)).toBeUndefined(); // ADTS AAC
    expect(mp3GaplessLength(mp3Start({ header: [0xff, 0xfd, 0x50, 0xc0] }), 16_000)).toBeUndefined(); // layer II
    expect(mp3GaplessLength(mp3Start({ header: [0xff, 0xf3, 0xf0, 0xc0] }), 16_000)).toBeUndefined(); // bitrate index 15
    expect(mp3GaplessLength(mp3Start({ header: [0xff, 0xf3, 0x8c, 0xc0] }), 16_000)).toBeUndefined(); // rate index 3
    expect(mp3GaplessLength(mp3Start({ header: [0x00, 0xff, 0xf3, 0x80] }), 16_000)).toBeUndefined();
    expect(mp3GaplessLength(Uint8Array.from([0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 1, 0]), 16_000)).toBeUndefined();
  });

  it("reads a cut-off tag without throwing", () => {
    const whole = mp3Start();
    for (let end = 0; end <= whole.length; end++) {
      const length = mp3GaplessLength(whole.subarray(0, end), 16_000);
      expect(length === undefined || length === Infinity || length === 60_356, `cut at ${end}`).toBe(true);
    }
  });
});
