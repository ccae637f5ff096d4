import { describe, expect, it } from "vitest";
import { engineEbnf, MAX_GRAMMAR_CHARS, parseGbnf } from "../../../../src/runtime/constrain/gbnf.js";

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
    // Non-ASCII class members become strings; `.` and [^] any character as a negated class.
    expect(ebnf('root ::= [a\\u00e9-\\u00ea] [^"] . [^]')).toBe('root ::= ([a] | "\\u00e9" | "\\u00ea") [^"] [^\\u0000] [^\\u0000]');
  });

  it("refuses what the engine would abort on or mis-enforce, naming line and column", () => {
    expect(problem("root ::= a\nb ::= c")).toBe('line 1, column 10: rule "a" is used but never defined');
    expect(problem('root ::= "x" "y" ::=')).toMatch(/line 1, column 18: expected the end of the line after rule "root"/);
    expect(problem('root ::= ("x"')).toMatch(/line 1, column 14: expected "\)" to close the group opened at line 1, column 10/);
    expect(problem("root ::= [z-a]")).toMatch(/goes backwards/);
    expect(problem("root ::= []")).toMatch(/matches no character/);
    expect(problem("root ::= *")).toMatch(/must follow an element/);
    expect(problem('root ::= "a"{3,2}')).toMatch(/maximum below its minimum/);
    expect(problem('root ::= "\\x00"')).toMatch(/NUL/);
    expect(problem('root ::= "\\ud800"')).toMatch(/not a Unicode character/);
    expect(problem("root ::= [\\u4e00-\\u9fa5]")).toMatch(/at most 256 are accepted/);
    expect(problem("")).toMatch(/defines no rule/);
    expect(problem('root ::= ([a-z]{1,128} " "){1,4}')).toMatch(/expands to 516 elements/);
    expect(problem('root ::= ([a-z]{1,120} " "){1,4}')).toBe("accepted");
    expect(problem("x".repeat(MAX_GRAMMAR_CHARS + 1))).toMatch(/characters long/);
    expect(problem('root ::= "a" | "b"\nother ::= root')).toBe("accepted");
  });
});
