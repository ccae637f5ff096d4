// Claim: integerRangeEbnf's rule, run through the real engine (web-xgrammar, no model needed),
// accepts exactly the canonical JSON texts of the integers in its range: every value within 120 of
// each bound is judged as JS judges it, and leading zeros, "-0", "+" and "-" alone are refused.
// Schemas whose bounded integers are placed and filled (placed-rules.ts, boundedIntegerRule) are
// held by the engine to what Ajv says of them, wherever the integer sits.
import { Ajv2020 } from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { boundedIntegerRule, integerRangeEbnf } from "../../../../src/runtime/constrain/int-range.js";
import { fillRules, placeRules } from "../../../../src/runtime/constrain/placed-rules.js";
import { acceptor, schemaEbnf, xgrammar } from "../../../support/grammar-acceptor.js";

type Bound = bigint | null;
const P53 = 2n ** 53n;

const EDGES: Array<[Bound, Bound]> = [
  [0n, 0n],
  [0n, 9n],
  [0n, 10n],
  [0n, 99n],
  [0n, 100n],
  [0n, 120n],
  [0n, 150n],
  [64n, 116n],
  [1n, 1n],
  [7n, 7n],
  [-1n, -1n],
  [-9n, 9n],
  [-150n, -3n],
  [-120n, 120n],
  [-200n, -100n],
  [1900n, 2100n],
  [0n, 65535n],
  [10n, 19n],
  [99n, 101n],
  [100n, 999n],
  [101n, 998n],
  [-1000n, 1000n],
  [5n, 17n],
  [-17n, -5n],
  [0n, null],
  [1n, null],
  [9n, null],
  [10n, null],
  [121n, null],
  [-5n, null],
  [-120n, null],
  [null, 0n],
  [null, -1n],
  [null, 9n],
  [null, 120n],
  [null, -121n],
  [null, null],
  [P53 - 1n, P53 - 1n],
  [-(P53 - 1n), P53 - 1n],
  [P53 - 200n, P53 + 200n],
  [0n, P53],
  [-P53, -P53 + 5n],
  [P53, null],
  [null, -P53],
];

/** Seeded random ranges over several scales. */
function randomRanges(count: number): Array<[Bound, Bound]> {
  let s = 0x2545f491;
  const next = (n: number) => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) % n;
  };
  const out: Array<[Bound, Bound]> = [];
  for (let i = 0; i < count; i++) {
    const scale = [10, 100, 1000, 100000, 1e9][next(5)];
    const a = BigInt(next(scale) - (next(3) === 0 ? next(scale) : 0));
    const b = a + BigInt(next(scale));
    const shape = next(10);
    out.push(shape === 0 ? [a, null] : shape === 1 ? [null, b] : [a, b]);
  }
  return out;
}

describe("integerRangeEbnf", () => {
  it("matches exactly the integers of each range, written canonically", async () => {
    const ranges = [...EDGES, ...randomRanges(260)];
    const wrong: string[] = [];
    let probes = 0;
    let maxAlternatives = 0;
    for (const [lo, hi] of ranges) {
      const body = integerRangeEbnf(lo, hi);
      maxAlternatives = Math.max(maxAlternatives, body.split("|").length);
      const grammar = await acceptor(`root ::= ${body}\n`);
      const values = new Set<bigint>([0n, 1n, -1n, 10n, -10n]);
      for (const bound of [lo, hi]) {
        if (bound === null) continue;
        for (let d = -120n; d <= 120n; d++) values.add(bound + d);
      }
      if (lo !== null && hi !== null) values.add((lo + hi) / 2n);
      const texts: Array<[string, boolean]> = [...values].map((v) => [String(v), (lo === null || v >= lo) && (hi === null || v <= hi)]);
      const inRange = (v: bigint) => (lo === null || v >= lo) && (hi === null || v <= hi);
      // Non-canonical spellings of values in range, and bare signs: all refused.
      for (const v of [lo, hi, 0n, 5n, -5n]) {
        if (v === null || !inRange(v)) continue;
        const abs = v < 0n ? -v : v;
        texts.push([(v < 0n ? "-" : "") + "0" + String(abs), false], ["+" + String(abs), false]);
      }
      texts.push(["-0", false], ["-", false], ["", false], ["00", false]);
      for (const [text, expected] of texts) {
        probes++;
        if (grammar.accepts(text) !== expected) wrong.push(`[${lo},${hi}] ${JSON.stringify(text)}: expected ${expected}`);
      }
      grammar.dispose();
    }
    console.log(JSON.stringify({ ranges: ranges.length, probes, maxAlternatives }));
    expect(wrong.slice(0, 20)).toEqual([]);
  });

  it("agrees with Testings.isGrammarAcceptString", async () => {
    const body = integerRangeEbnf(0, 120);
    const xg = await xgrammar();
    const grammar = await xg.Grammar.fromEBNF(`root ::= ${body}\n`);
    const fast = await acceptor(`root ::= ${body}\n`);
    for (const text of ["0", "120", "121", "123", "007", "-0", "99"])
      expect(fast.accepts(text), text).toBe(await xg.Testings.isGrammarAcceptString(grammar, text));
    fast.dispose();
    grammar.dispose();
  });

  it("refuses an empty range and non-integer bounds", () => {
    expect(() => integerRangeEbnf(5, 4)).toThrow(RangeError);
    expect(() => integerRangeEbnf(0.5, 4)).toThrow(RangeError);
    expect(integerRangeEbnf(3, 3)).toBe('"3"');
  });
});

describe("bounded integers placed and filled", () => {
  const cases: Array<[string, unknown, unknown[]]> = [
    ["the root", { type: "integer", minimum: 0, maximum: 120 }, [0, 120, 121, 123, 129, -1, "x"]],
    [
      "a property",
      {
        type: "object",
        properties: { age: { type: "integer", minimum: 0, maximum: 120 }, n: { type: "integer" } },
        required: ["age"],
        additionalProperties: false,
      },
      [{ age: 120 }, { age: 123 }, { age: 5, n: -999 }, { n: 1 }],
    ],
    ["items", { type: "array", items: { type: "integer", minimum: 64, maximum: 116 }, maxItems: 3 }, [[64, 116], [117], [], [63]]],
    [
      "prefixItems, exclusive bounds",
      { type: "array", prefixItems: [{ type: "integer", exclusiveMinimum: -151, exclusiveMaximum: -2 }, { type: "string" }], items: false },
      [
        [-150, "a"],
        [-3, "b"],
        [-2, "b"],
        [-151, "c"],
        [-200, "a"],
      ],
    ],
    ["anyOf", { anyOf: [{ type: "integer", minimum: -120, maximum: 120 }, { type: "null" }] }, [null, 120, -120, 121, -121, -200]],
    [
      "$defs, referenced twice",
      {
        type: "object",
        properties: { a: { $ref: "#/$defs/year" }, b: { $ref: "#/$defs/year" } },
        required: ["a"],
        additionalProperties: false,
        $defs: { year: { type: ["integer"], minimum: 1900, maximum: 2100 } },
      },
      [{ a: 1900 }, { a: 2101 }, { a: 2000, b: 1899 }, { a: 2000, b: 2100 }],
    ],
    [
      "definitions",
      {
        type: "object",
        properties: { a: { $ref: "#/definitions/d" } },
        required: ["a"],
        additionalProperties: false,
        definitions: { d: { type: "integer", maximum: -1 } },
      },
      [{ a: -1 }, { a: 0 }, { a: -123456789 }],
    ],
    [
      "additionalProperties",
      { type: "object", additionalProperties: { type: "integer", minimum: 0, maximum: 150 } },
      [{ x: 150 }, { x: 151 }, { y: 0, z: 155 }],
    ],
    ["an enum beside the bounds", { type: "integer", minimum: 1, maximum: 5, enum: [0, 3, 7, "a"] }, [0, 3, 7, "a", 1]],
    [
      "a property named like the placeholders",
      { type: "object", properties: { kilnrule0: { type: "integer", maximum: 5 } }, additionalProperties: false },
      [{ kilnrule0: 5 }, { kilnrule0: 6 }, { kilnrule0: -99 }],
    ],
    ["one-sided", { type: "integer", minimum: 10 }, [10, 9, 100000000000, 0]],
    [
      "a reference into a replaced integer's $defs",
      {
        type: "object",
        properties: {
          p: { type: "integer", minimum: 0, maximum: 120, $defs: { inner: { type: "integer", minimum: 0, maximum: 9 } } },
          q: { $ref: "#/properties/p/$defs/inner" },
        },
        additionalProperties: false,
      },
      [{ p: 120, q: 9 }, { q: 10 }, { p: 121 }],
    ],
    [
      "an unused definition",
      { type: "object", properties: { s: { type: "string" } }, $defs: { z: { type: "integer", minimum: 0, maximum: 3 } }, additionalProperties: false },
      [{}, { s: "x" }, { s: 1 }],
    ],
  ];
  const ajv = new Ajv2020({ strict: false });
  for (const [name, schema, values] of cases) {
    it(name, async () => {
      const before = JSON.stringify(schema);
      const placed = placeRules(schema, boundedIntegerRule);
      expect(JSON.stringify(schema)).toBe(before);
      const ebnf = fillRules(await schemaEbnf(placed.schema), placed);
      expect(ebnf).not.toMatch(new RegExp(placed.marker + "\\d"));
      const engine = await acceptor(ebnf);
      const validate = ajv.compile(schema as object);
      for (const v of values) expect(engine.accepts(JSON.stringify(v)), JSON.stringify(v)).toBe(validate(v));
      engine.dispose();
    });
  }
});
