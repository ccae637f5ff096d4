import { describe, expect, it } from "vitest";
import { jsonStringClasses } from "../../../../src/runtime/constrain/json-string-classes.js";

describe("jsonStringClasses", () => {
  it("leaves control characters, quotes and backslashes out of negated classes and the any-character class", () => {
    expect(jsonStringClasses(String.raw`s ::= (("\"" [^\"\\\r\n] s_1 "\""))`)).toBe(String.raw`s ::= (("\"" [^\0-\x1f\"\\\"\\\r\n] s_1 "\""))`);
    expect(jsonStringClasses(String.raw`p ::= (("a" [\0-\U0010ffff] "b" [^[\f\n\r\t\v \xa0]))`)).toBe(
      String.raw`p ::= (("a" [^\0-\x1f\"\\] "b" [^\0-\x1f\"\\[\f\n\r\t\v \xa0]))`,
    );
  });

  it("keeps positive classes, classes already without them, and literals that look like classes", () => {
    const same = [
      String.raw`n ::= (([1-9] [0-9]*) | ("0"))`,
      String.raw`b ::= (("\"") | ([^\0-\x1f\"\\\r\n] b) | ("\\" e b)) (=([ \n\t]* [,}\]:]))`,
      String.raw`e ::= (("[^x]") | ("a\"[^" [a-z]))`,
      String.raw`m ::= (([ !#-[\]-~]))`,
    ];
    for (const ebnf of same) expect(jsonStringClasses(ebnf)).toBe(ebnf);
  });

  it("refuses an unclosed literal or class rather than guess", () => {
    expect(() => jsonStringClasses('r ::= "abc')).toThrow(/unclosed literal/);
    expect(() => jsonStringClasses("r ::= [^abc")).toThrow(/unclosed class/);
  });
});
