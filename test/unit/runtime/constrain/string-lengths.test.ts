// Claim: a length-bounded string kiln writes, run through the real engine inside a schema, holds
// exactly the strings of minLength..maxLength characters (code points, as JSON Schema counts them)
// without escapes or raw control characters, beside null where the type allows it; strings with
// the same bounds share one rule; and the engine's own rules are left where kiln does not write one.
import { describe, expect, it } from "vitest";
import { fillRules, placeRules } from "../../../../src/runtime/constrain/placed-rules.js";
import { boundsBesidePatternHold, placesStringLength, stringLengthRule } from "../../../../src/runtime/constrain/string-lengths.js";
import { acceptor, schemaEbnf } from "../../../support/grammar-acceptor.js";

async function grammarOf(schema: unknown) {
  const placed = placeRules(schema, stringLengthRule);
  return { placed, grammar: await acceptor(fillRules(await schemaEbnf(placed.schema), placed)) };
}

describe("string lengths", () => {
  it("holds minLength..maxLength characters, counting code points, with no escape or control character", async () => {
    const { grammar } = await grammarOf({ type: "string", minLength: 2, maxLength: 300 });
    const ok = (s: string) => grammar.accepts(JSON.stringify(s));
    expect(ok("ab")).toBe(true);
    expect(ok("a")).toBe(false);
    expect(ok("x".repeat(300))).toBe(true);
    expect(ok("x".repeat(301))).toBe(false);
    expect(ok("é☃")).toBe(true);
    expect(ok("😀".repeat(300))).toBe(true);
    expect(ok("😀".repeat(301))).toBe(false);
    expect(ok('a"b')).toBe(false);
    expect(ok("a\\b")).toBe(false);
    expect(ok("a\nb")).toBe(false);
    expect(grammar.accepts('"a\tb"')).toBe(false);
    grammar.dispose();
  });

  it("minLength alone, an exact length, an empty one, and a nullable string", async () => {
    const cases: Array<[unknown, Array<[unknown, boolean]>]> = [
      [
        { type: "string", minLength: 3 },
        [
          ["abc", true],
          ["ab", false],
          ["x".repeat(5000), true],
        ],
      ],
      [
        { type: "string", minLength: 4, maxLength: 4 },
        [
          ["abcd", true],
          ["abc", false],
          ["abcde", false],
        ],
      ],
      [
        { type: "string", maxLength: 0 },
        [
          ["", true],
          ["a", false],
        ],
      ],
      [
        { type: ["string", "null"], maxLength: 2 },
        [
          ["ab", true],
          [null, true],
          ["abc", false],
          [0, false],
        ],
      ],
    ];
    for (const [schema, values] of cases) {
      const { grammar } = await grammarOf(schema);
      for (const [v, expected] of values) expect(grammar.accepts(JSON.stringify(v)), `${JSON.stringify(schema)} ${JSON.stringify(v)}`).toBe(expected);
      grammar.dispose();
    }
  });

  it("shares one rule between strings with the same bounds, wherever they sit", async () => {
    const word = { type: "string", minLength: 1, maxLength: 200 };
    const schema = {
      type: "object",
      properties: { a: word, b: { type: "array", items: word, maxItems: 3 }, c: { $ref: "#/$defs/w" }, d: { type: "string", maxLength: 5 } },
      required: ["a", "b"],
      additionalProperties: false,
      $defs: { w: word },
    };
    const { placed, grammar } = await grammarOf(schema);
    expect(placed.rules).toHaveLength(2);
    expect(grammar.accepts(JSON.stringify({ a: "x".repeat(200), b: ["y"], c: "z", d: "12345" }))).toBe(true);
    expect(grammar.accepts(JSON.stringify({ a: "x", b: [""] }))).toBe(false);
    expect(grammar.accepts(JSON.stringify({ a: "x", b: [], d: "123456" }))).toBe(false);
    grammar.dispose();
  });

  it("beside a pattern that is one class repeated, narrows its counts; a pattern already within the bounds is left to the engine", async () => {
    const cases: Array<[Record<string, unknown>, Array<[string, boolean]>]> = [
      [
        { type: "string", pattern: "^[a-z]+$", maxLength: 3 },
        [
          ["abc", true],
          ["abcd", false],
          ["", false],
          ["aB", false],
        ],
      ],
      [
        { type: "string", pattern: "^\\w{2,}$", minLength: 3, maxLength: 4 },
        [
          ["ab", false],
          ["abc", true],
          ["ab_9", true],
          ["abcde", false],
        ],
      ],
      [
        { type: "string", pattern: "[^,]*", minLength: 1, maxLength: 300 },
        [
          ["a;b", true],
          ["a,b", false],
          ["", false],
          ["é".repeat(300), true],
          ["x".repeat(301), false],
          ['a"b', false],
        ],
      ],
      [
        { type: "string", pattern: '^["a-c]+$', maxLength: 2 },
        [
          ["ab", true],
          ["abc", false],
          ['a"', false],
        ],
      ],
      [
        { type: "string", pattern: "^a*$", maxLength: 0 },
        [
          ["", true],
          ["a", false],
        ],
      ],
    ];
    for (const [node, values] of cases) {
      expect(placesStringLength(node), JSON.stringify(node)).toBe(true);
      const { grammar } = await grammarOf(node);
      for (const [v, expected] of values) expect(grammar.accepts(JSON.stringify(v)), `${JSON.stringify(node)} ${JSON.stringify(v)}`).toBe(expected);
      grammar.dispose();
    }
    // Its own lengths within the bounds: the bounds hold with the engine's pattern grammar alone.
    const within = { type: "string", pattern: "^[A-Z]{2}\\d{4}$", maxLength: 6 };
    expect(placesStringLength(within)).toBe(false);
    expect(boundsBesidePatternHold(within)).toBe(true);
  });

  it("leaves patterns, formats, listed values and other types to the engine", () => {
    for (const node of [
      { type: "string", maxLength: 5, pattern: "^a+b$" },
      { type: "string", maxLength: 5, format: "email" },
      { type: "string", maxLength: 5, enum: ["a"] },
      { type: ["string", "number"], maxLength: 5 },
      { type: "string" },
      { maxLength: 5 },
    ])
      expect(placesStringLength(node), JSON.stringify(node)).toBe(false);
  });
});
