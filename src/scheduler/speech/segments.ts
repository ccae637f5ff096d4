/**
 * From one window's decoded tokens to segments, by Whisper's timestamp grammar: a segment is the text
 * between a pair of timestamps. Pure, so the rules are unit-tested without a model.
 */
import { TIME_PRECISION } from "../../runtime/artifact/index.js";

/** One window's segment before text and ids are attached: token range and times relative to the window. */
export interface WindowSegment {
  /** Tokens of the segment, timestamps included. */
  tokens: number[];
  start: number;
  end: number;
}

export interface WindowSplit {
  segments: WindowSegment[];
  /** Mel frames to advance the window by. */
  advance: number;
}

/** Mel frames per timestamp step: the encoder halves 100 frames/s to 50 positions/s. */
const FRAMES_PER_TIMESTAMP = 2;

/**
 * Splits a window's sampled tokens (no <|endoftext|>) into segments (openai-whisper's `transcribe`):
 * consecutive timestamp pairs close segments; when the window ends on a single timestamp the whole
 * window is consumed, otherwise the next window starts at the last closing timestamp. Without any
 * pair, the window is one segment up to its last timestamp (or its end).
 */
export function splitWindow(tokens: readonly number[], timestampBegin: number, windowFrames: number, windowSeconds: number): WindowSplit {
  const isTs = (t: number) => t >= timestampBegin;
  const time = (t: number) => (t - timestampBegin) * TIME_PRECISION;
  const n = tokens.length;
  const singleTimestampEnding = n >= 2 && !isTs(tokens[n - 2]) && isTs(tokens[n - 1]);
  const cuts: number[] = [];
  for (let i = 1; i < n; i++) if (isTs(tokens[i - 1]) && isTs(tokens[i])) cuts.push(i);
  if (cuts.length > 0) {
    if (singleTimestampEnding) cuts.push(n);
    const segments: WindowSegment[] = [];
    let last = 0;
    for (const cut of cuts) {
      const piece = tokens.slice(last, cut);
      segments.push({ tokens: piece, start: time(piece[0]), end: time(piece[piece.length - 1]) });
      last = cut;
    }
    const advance = singleTimestampEnding ? windowFrames : (tokens[last - 1] - timestampBegin) * FRAMES_PER_TIMESTAMP;
    return { segments, advance: Math.max(1, Math.min(windowFrames, advance)) };
  }
  let duration = windowSeconds;
  const stamps = tokens.filter(isTs);
  if (stamps.length > 0 && stamps[stamps.length - 1] !== timestampBegin) duration = time(stamps[stamps.length - 1]);
  return { segments: n > 0 ? [{ tokens: [...tokens], start: 0, end: duration }] : [], advance: windowFrames };
}

/**
 * The transcript's text: the segments' texts concatenated as decoded (Whisper puts the space between
 * words at the start of a segment's text), trimmed at both ends. The text of the first segments is
 * a prefix of the text of all of them (trailing whitespace is held back until something follows),
 * so a stream can send the growth of this text window by window and join to the final text exactly.
 */
export function joinSegmentTexts(segments: readonly { text: string }[]): string {
  return segments
    .map((s) => s.text)
    .join("")
    .trim();
}
