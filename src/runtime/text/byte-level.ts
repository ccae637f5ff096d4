/**
 * GPT-2's byte-to-unicode mapping: every byte gets a printable stand-in character so that
 * byte-level BPE vocabularies can be stored as text. Printable Latin-1 bytes map to themselves,
 * the rest to U+0100 onwards in byte order (llama.cpp's unicode_byte_to_utf8_map).
 */
function buildByteToChar(): string[] {
  const map: string[] = new Array(256);
  const keepsItself = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let next = 256;
  for (let b = 0; b < 256; b++) map[b] = String.fromCharCode(keepsItself(b) ? b : next++);
  return map;
}

export const BYTE_TO_CHAR: readonly string[] = buildByteToChar();

/** Stand-in code point -> byte. */
export const CHAR_TO_BYTE: ReadonlyMap<number, number> = new Map(BYTE_TO_CHAR.map((c, b) => [c.charCodeAt(0), b]));

/** The byte-level form of code points cps[start, end): their UTF-8 bytes, each as its stand-in. */
export function codepointsToByteLevel(cps: ArrayLike<number>, start: number, end: number): string {
  let out = "";
  for (let i = start; i < end; i++) {
    const cp = cps[i];
    if (cp < 0x80) {
      out += BYTE_TO_CHAR[cp];
    } else if (cp < 0x800) {
      out += BYTE_TO_CHAR[0xc0 | (cp >> 6)] + BYTE_TO_CHAR[0x80 | (cp & 0x3f)];
    } else if (cp < 0x10000) {
      out += BYTE_TO_CHAR[0xe0 | (cp >> 12)] + BYTE_TO_CHAR[0x80 | ((cp >> 6) & 0x3f)] + BYTE_TO_CHAR[0x80 | (cp & 0x3f)];
    } else {
      out +=
        BYTE_TO_CHAR[0xf0 | (cp >> 18)] + BYTE_TO_CHAR[0x80 | ((cp >> 12) & 0x3f)] + BYTE_TO_CHAR[0x80 | ((cp >> 6) & 0x3f)] + BYTE_TO_CHAR[0x80 | (cp & 0x3f)];
    }
  }
  return out;
}

const utf8 = new TextEncoder();

/**
 * The bytes a byte-level token text stands for (llama.cpp's llama_decode_text). A character with no
 * byte mapping cannot come from GPT-2 encoding; llama.cpp then writes a visible "[UNK_BYTE_0x..]"
 * marker, and so do we, so a broken vocabulary shows up in output instead of vanishing.
 */
export function byteLevelToBytes(text: string): Uint8Array {
  const bytes: number[] = [];
  for (const ch of text) {
    const b = CHAR_TO_BYTE.get(ch.codePointAt(0)!);
    if (b !== undefined) {
      bytes.push(b);
      continue;
    }
    const raw = utf8.encode(ch);
    const marker = "[UNK_BYTE_0x" + Array.from(raw, (x) => x.toString(16).padStart(2, "0")).join("") + text + "]";
    bytes.push(...utf8.encode(marker));
  }
  return Uint8Array.from(bytes);
}
