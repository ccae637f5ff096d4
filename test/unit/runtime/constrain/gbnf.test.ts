import { describe, expect, it } from "vitest";
import { engineEbnf, MAX_GRAMMAR_CHARS, parseGbnf, utf8Sequences } from "../../../../src/runtime/constrain/gbnf.js";
import { Xoshiro128ss } from "../../../../src/runtime/sampling/prng.js";

const ebnf = (text: string) => engineEbnf(parseGbnf(text));
const problem = (text: string) => {
  try {
    parseGbnf(text);
  } catch (e) {
    return (e as Error).message;
  }
  return "accepted";
};

describe("GBNF grammars", () => {
  it("rewrites rules with root first and every other rule renamed, so no name meets the engine's generated ones", () => {
    expect(ebnf('item ::= [a-z]+\nroot_1 ::= "x"\nroot ::= item ("," item)* root_1')).toBe(
      'root ::= rule-0 ("," rule-0)* rule-1\nrule-0 ::= [a-z]+\nrule-1 ::= "x"',
    );
  });

  it("reads llama.cpp's layout: comments, lines continued inside groups and after | and ::=, empty alternatives", () => {
    const text = '# a comment\nroot ::=\n  "a" (\n    "b" | "c" |  # inner\n  ) "d" |\n  "e"\r\nws ::= [ \\t\\n]*\n';
    expect(ebnf(text)).toBe('root ::= "a" ("b" | "c" | "") "d" | "e"\nrule-0 ::= [ \\u0009\\u000a]*');
  });

  it("writes escapes, counts and non-ASCII characters as the engine reads them", () => {
    expect(ebnf('root ::= "\\"\\\\\\x41\\u00e9\\U0001F600" [\\]\\-^a] "b"{2} "c"{1,} "d"{0,3} ("e"+)?')).toBe(
      'root ::= "\\"\\\\A\\u00e9\\U0001f600" [\\]\\-\\^a] "b"{2} "c"+ "d"{0,3} ("e"+)?',
    );
    // Non-ASCII class members as their UTF-8 bytes, a byte class each; `.` and [^] any character as a negated class.
    expect(ebnf('root ::= [a\\u00e9-\\u00ea] [^"] . [^]')).toBe('root ::= ([a] | [\\u00c3\\u00c3] [\\u00a9-\\u00aa]) [^"] [^\\u0000] [^\\u0000]');
    // A negated class with a non-ASCII member: what it allows, written out (NUL and surrogates never).
    expect(ebnf("root ::= [^\\x00-\\x60b-\\x7f\\u0080-\\U0010FFFE]")).toBe(
      "root ::= ([a] | [\\u00f4\\u00f4] [\\u008f\\u008f] [\\u00bf\\u00bf] [\\u00bf\\u00bf])",
    );
    // A class of one multi-byte character is grouped, so that a count repeats the character, not its last byte.
    expect(ebnf("root ::= [\u00e9]? [\u00e0-\u00ff]{2} [a]*")).toBe(
      "root ::= ([\\u00c3\\u00c3] [\\u00a9\\u00a9])? ([\\u00c3\\u00c3] [\\u00a0-\\u00bf]){2} [a]*",
    );
    // NUL may be named in a class (JSON's grammars exclude it), never written.
    expect(ebnf('root ::= [^"\\\\\\x7F\\x00-\\x1F]')).toBe('root ::= [^"\\\\\\u007f\\u0000-\\u001f]');
  });

  it("writes any range of code points as UTF-8 byte sequences that encode exactly that range", () => {
    const decode = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    const expand = (seq: Array<[number, number]>): number[][] =>
      seq.reduce<number[][]>((acc, [lo, hi]) => acc.flatMap((prefix) => Array.from({ length: hi - lo + 1 }, (_, i) => [...prefix, lo + i])), [[]]);
    const rng = Xoshiro128ss.fromSeed(5);
    for (let n = 0; n < 40; n++) {
      const lo = 0x80 + Math.floor(rng.nextFloat() * 0x30000);
      const hi = Math.min(0x10ffff, lo + Math.floor(rng.nextFloat() * (n % 2 ? 300 : 70000)));
      const out: Array<Array<[number, number]>> = [];
      utf8Sequences(lo, hi, out);
      const got = out.flatMap(expand).map((bytes) => decode.decode(new Uint8Array(bytes)).codePointAt(0)!);
      const want = Array.from({ length: hi - lo + 1 }, (_, i) => lo + i).filter((c) => c < 0xd800 || c > 0xdfff);
      expect(
        got.sort((a, b) => a - b),
        `${lo.toString(16)}..${hi.toString(16)}`,
      ).toEqual(want);
    }
    const all: Array<Array<[number, number]>> = [];
    utf8Sequences(0x80, 0x10ffff, all);
    expect(all.reduce((n, seq) => n + seq.reduce((m, [lo, hi]) => m * (hi - lo + 1), 1), 0)).toBe(0x110000 - 0x80 - 0x800);
  });

  it("refuses what the engine would abort on or mis-enforce, naming line and column", () => {
    expect(problem("root ::= a\nb ::= c")).toBe('line 1, column 10: rule "a" is used but never defined');
    expect(problem('root ::= "x" "y" ::=')).toMatch(/line 1, column 18: expected the end of the line after rule "root"/);
    expect(problem('root ::= ("x"')).toMatch(/line 1, column 14: expected "\)" to close the group opened at line 1, column 10/);
    expect(problem("root ::= [z-a]")).toMatch(/goes backwards/);
    expect(problem("root ::= []")).toMatch(/matches no character/);
    expect(problem("root ::= *")).toMatch(/must follow an element/);
    expect(problem('root ::= "a"{3,2}')).toMatch(/maximum below its minimum/);
    expect(problem('root ::= "\\x00"')).toMatch(/cannot hold a NUL/);
    expect(problem("root ::= [\\x00]")).toMatch(/matches no character/);
    expect(problem('root ::= "\\ud800"')).toMatch(/not a Unicode character/);
    expect(problem("")).toMatch(/defines no rule/);
    expect(problem('root ::= ([a-z]{1,128} " "){1,4}')).toMatch(/expands to 516 elements/);
    expect(problem('root ::= ([a-z]{1,120} " "){1,4}')).toBe("accepted");
    expect(problem("x".repeat(MAX_GRAMMAR_CHARS + 1))).toMatch(/characters long/);
    expect(problem('root ::= "a" | "b"\nother ::= root')).toBe("accepted");
    // Past 128, only a plain element repeats (the engine repeats it without writing it out), each counting 200 elements.
    expect(problem('root ::= "x" [^"\\n]{0,2000} "y"')).toBe("accepted");
    expect(problem('root ::= ("ab" | [c-e]){3000} .{129}')).toBe("accepted");
    expect(problem('root ::= x{200}\nx ::= "a"')).toMatch(/column 11: counts above 128 are accepted only on a literal, a class, "\." or a group of those/);
    expect(problem('root ::= ("a"+){200}')).toMatch(/accepted only on a literal/);
    expect(problem('root ::= "a"{10001}')).toMatch(/counts above 10000 are not accepted/);
    expect(problem("root ::= [a-z]{200} [0-9]{200} [A-Z]{200}")).toMatch(/expands to 600 elements/);
  });

  it("refuses a grammar whose root never ends, and takes recursion with a way out", () => {
    expect(problem("root ::= root")).toBe(
      'line 1, column 1: rule "root" derives no text that ends: each of its alternatives goes on into a rule that never ends ("root"); give one of them an alternative without itself',
    );
    expect(problem('root ::= "a" root')).toMatch(/^line 1, column 1: rule "root" derives no text that ends/);
    expect(problem('root ::= "(" item ")"\nitem ::= "x" item | "[" item "]"')).toMatch(/never ends \("root", "item"\)/);
    expect(problem('root ::= item+\nitem ::= ("x" item)')).toMatch(/never ends \("root", "item"\)/);
    // Each has an alternative, an optional part or an empty repetition that ends.
    for (const ending of [
      'root ::= "a" root | "b"',
      'root ::= "a" root?',
      'root ::= ("a" root)*',
      'root ::= root "a" | "a"',
      'root ::= "(" item ")"\nitem ::= "x" | "[" item "]"',
      'root ::= "a" | loop\nloop ::= "b" loop',
      'root ::= ""',
    ])
      expect(problem(ending), ending).toBe("accepted");
  });
});
