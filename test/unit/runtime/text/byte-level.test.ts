import { describe, expect, it } from "vitest";
import { BYTE_TO_CHAR, byteLevelToBytes, codepointsToByteLevel } from "../../../../src/runtime/text/byte-level.js";

describe("GPT-2 byte-to-unicode mapping", () => {
  it("keeps printable bytes and moves the rest above U+00FF in byte order", () => {
    expect(BYTE_TO_CHAR[0x41]).toBe("A");
    expect(BYTE_TO_CHAR[0xe9]).toBe("é");
    expect(BYTE_TO_CHAR[0x00]).toBe("\u0100");
    expect(BYTE_TO_CHAR[0x0a]).toBe("Ċ");
    expect(BYTE_TO_CHAR[0x20]).toBe("Ġ");
    expect(BYTE_TO_CHAR[0xad]).toBe("\u0143");
    expect(new Set(BYTE_TO_CHAR).size).toBe(256);
  });

  it("encodes code points through UTF-8 and decodes back to the same bytes", () => {
    const text = "a é 😀\n";
    const cps = Uint32Array.from([...text].map((c) => c.codePointAt(0)!));
    const encoded = codepointsToByteLevel(cps, 0, cps.length);
    expect(encoded).toBe("aĠÃ©ĠðŁĺĢĊ");
    expect(Buffer.from(byteLevelToBytes(encoded)).toString("utf8")).toBe(text);
  });

  it("marks characters that no byte maps to, as llama.cpp does", () => {
    expect(Buffer.from(byteLevelToBytes("a\u4e00")).toString("utf8")).toBe("a[UNK_BYTE_0xe4b880a\u4e00]");
  });
});
