import { describe, expect, it } from "vitest";
import { applyTokenMask, checkJsonSchema, ConstraintError } from "../../../../src/runtime/constrain/index.js";
import { acceptor, schemaEbnf } from "../../../support/grammar-acceptor.js";

const obj = (v: unknown) => ({ type: "object", properties: { v }, required: ["v"], additionalProperties: false });

function refusal(schema: unknown): ConstraintError {
  try {
    checkJsonSchema(schema);
  } catch (e) {
    expect(e).toBeInstanceOf(ConstraintError);
    return e as ConstraintError;
  }
  throw new Error(`accepted: ${JSON.stringify(schema)}`);
}

describe("checkJsonSchema accepts what the engine enforces", () => {
  const accepted: Array<[string, unknown]> = [
    ["true", true],
    ["empty object", {}],
    [
      "nested object with annotations",
      {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        $id: "urn:x",
        title: "T",
        description: "d",
        $comment: "c",
        type: "object",
        strict: true,
        default: {},
        examples: [{}],
        properties: { name: { type: "string", minLength: 1, maxLength: 64 }, tags: { type: "array", items: { type: "string" }, minItems: 0, maxItems: 64 } },
        required: ["name"],
        additionalProperties: false,
      },
    ],
    ["integer bounds", obj({ type: "integer", minimum: 0, maximum: 150, exclusiveMaximum: 151 })],
    ["integer bounds with an enum holding a value within", obj({ type: "integer", minimum: 1, maximum: 5, enum: [0, 3, "a"] })],
    ["type array", obj({ type: ["string", "null"] })],
    ["enum and const", { type: "object", properties: { a: { enum: ["x", 1, null] }, b: { const: { k: [1] } } } }],
    ["anyOf and oneOf", obj({ anyOf: [{ type: "integer" }, { oneOf: [{ type: "string" }, { type: "boolean" }] }] })],
    ["$defs reference", { $defs: { P: { type: "integer" } }, ...obj({ $ref: "#/$defs/P" }) }],
    ["definitions reference", { definitions: { P: { type: "integer" } }, ...obj({ $ref: "#/definitions/P", description: "fine" }) }],
    ["recursive reference", { $defs: { N: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/N" } } } } }, $ref: "#/$defs/N" }],
    ["root reference", { type: "object", properties: { next: { anyOf: [{ $ref: "#" }, { type: "null" }] } } }],
    ["pattern", obj({ type: "string", pattern: "^[a-z]{3}-\\d{2}(?:x|y)?$" })],
    ["escaped backslash then digit", obj({ type: "string", pattern: "^\\\\1$" })],
    ["\\b inside a class is a backspace", obj({ type: "string", pattern: "^[\\b]$" })],
    ["supported formats", obj({ type: "string", format: "date-time" })],
    ["prefixItems and items false", obj({ type: "array", prefixItems: [{ type: "integer" }, { type: "string" }], items: false })],
    ["additionalProperties schema", { type: "object", additionalProperties: { type: "integer" }, minProperties: 1, maxProperties: 3 }],
    ["propertyNames", { type: "object", propertyNames: { pattern: "^[a-z]+$" } }],
    ["vendor extension keyword", obj({ type: "string", "x-note": 1 })],
    ["a list whose next item is optional", { type: "object", properties: { v: { type: "integer" }, next: { $ref: "#" } }, required: ["v"] }],
    ["a list whose required next may be null", { type: ["object", "null"], properties: { next: { $ref: "#" } }, required: ["next"] }],
    [
      "a tree whose required children may be none",
      { $defs: { N: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/N" } } }, required: ["kids"] } }, $ref: "#/$defs/N" },
    ],
    [
      "a required recursion with an ending alternative",
      {
        $defs: { E: { anyOf: [{ type: "integer" }, { type: "object", properties: { add: { $ref: "#/$defs/E" } }, required: ["add"] }] } },
        ...obj({ $ref: "#/$defs/E" }),
      },
    ],
  ];
  for (const [name, schema] of accepted) it(name, () => expect(() => checkJsonSchema(schema)).not.toThrow());

  it("nesting up to 32 levels", () => {
    let s: unknown = { type: "integer" };
    for (let i = 0; i < 32; i++) s = { type: "array", items: s };
    expect(() => checkJsonSchema(s)).not.toThrow();
  });
});

describe("checkJsonSchema refuses a schema whose every value goes on without end", () => {
  const endless: Array<[string, unknown, string]> = [
    ["a required property of the root's own schema", { type: "object", properties: { a: { $ref: "#" } }, required: ["a"] }, 'required property "a"'],
    [
      "a required chain through $defs",
      {
        $defs: {
          A: { type: "object", properties: { b: { $ref: "#/$defs/B" } }, required: ["b"] },
          B: { type: "object", properties: { a: { $ref: "#/$defs/A" } }, required: ["a"] },
        },
        ...obj({ $ref: "#/$defs/A" }),
      },
      'required property "v" → required property "b" → required property "a"',
    ],
    ["an array that must hold one of itself", { type: "array", items: { $ref: "#" }, minItems: 1 }, "item 0 (minItems 1)"],
    [
      "alternatives that all go on",
      {
        $defs: {
          L: {
            anyOf: [
              { type: "object", properties: { x: { $ref: "#/$defs/L" } }, required: ["x"] },
              { type: "array", prefixItems: [{ $ref: "#/$defs/L" }], minItems: 1 },
            ],
          },
        },
        $ref: "#/$defs/L",
      },
      "every alternative of anyOf",
    ],
    ["a required property held by additionalProperties", { type: "object", additionalProperties: { $ref: "#" }, required: ["k"] }, 'required property "k"'],
  ];
  it("a required property that additionalProperties false leaves out", () => {
    const e = refusal({ type: "object", properties: { b: { type: "string" } }, required: ["a"], additionalProperties: false });
    expect(e.message).toBe('no value it allows can be written: required property "a" has a schema that allows no value (additionalProperties or items false)');
  });
  for (const [name, schema, way] of endless) {
    it(name, () => {
      const e = refusal(schema);
      expect(e.keyword).toBe("required");
      expect(e.message).toContain(`no value it allows ends: ${way}`);
    });
  }
});

describe("checkJsonSchema refuses with keyword and path", () => {
  const refused: Array<[string, unknown, string | undefined, string]> = [
    ["allOf", obj({ allOf: [{ type: "integer" }] }), "allOf", "/properties/v/allOf"],
    ["not", obj({ not: { type: "string" } }), "not", "/properties/v/not"],
    ["if", obj({ if: { type: "integer" }, then: {} }), "if", "/properties/v/if"],
    ["uniqueItems", obj({ type: "array", uniqueItems: true }), "uniqueItems", "/properties/v/uniqueItems"],
    ["contains", obj({ type: "array", contains: { const: 1 } }), "contains", "/properties/v/contains"],
    ["multipleOf", obj({ type: "integer", multipleOf: 5 }), "multipleOf", "/properties/v/multipleOf"],
    ["dependentRequired", { type: "object", dependentRequired: { a: ["b"] } }, "dependentRequired", "/dependentRequired"],
    ["patternProperties", { type: "object", patternProperties: { "^x": {} } }, "patternProperties", "/patternProperties"],
    ["number bounds", obj({ type: "number", minimum: 0 }), "minimum", "/properties/v/minimum"],
    ["untyped bounds", obj({ maximum: 3 }), "maximum", "/properties/v/maximum"],
    ["integer-or-null bounds", obj({ type: ["integer", "null"], minimum: 0 }), "minimum", "/properties/v/minimum"],
    ["fractional integer bound", obj({ type: "integer", minimum: 1.5 }), "minimum", "/properties/v/minimum"],
    ["empty integer range", obj({ type: "integer", minimum: 5, exclusiveMaximum: 5 }), "exclusiveMaximum", "/properties/v/exclusiveMaximum"],
    ["integer bounds beside anyOf", obj({ type: "integer", minimum: 0, anyOf: [{ type: "integer" }] }), "minimum", "/properties/v/minimum"],
    ["integer bounds beside oneOf", obj({ type: "integer", maximum: 9, oneOf: [{ type: "integer" }] }), "maximum", "/properties/v/maximum"],
    ["integer bounds leaving no enum value", obj({ type: "integer", minimum: 1, maximum: 5, enum: [0, 6, "3"] }), "enum", "/properties/v/enum"],
    ["integer bounds leaving the const out", obj({ type: "integer", maximum: 5, const: 7 }), "const", "/properties/v/const"],
    ["missing $ref target", obj({ $ref: "#/$defs/Missing" }), "$ref", "/properties/v/$ref"],
    ["external $ref", obj({ $ref: "https://example.com/s.json" }), "$ref", "/properties/v/$ref"],
    ["$ref to itself", { $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, "$ref", "/$ref"],
    ["$ref cycle of two", { $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, ...obj({ $ref: "#/$defs/a" }) }, "$ref", "/properties/v/$ref"],
    [
      "$ref cycle through anyOf",
      { $defs: { a: { anyOf: [{ type: "null" }, { $ref: "#/$defs/a" }] } }, ...obj({ $ref: "#/$defs/a" }) },
      "$ref",
      "/properties/v/$ref",
    ],
    ["root $ref to the root", { $ref: "#" }, "$ref", "/$ref"],
    ["keyword beside $ref", { $defs: { P: { type: "integer" } }, ...obj({ $ref: "#/$defs/P", minimum: 1 }) }, "minimum", "/properties/v/minimum"],
    ["unknown type", obj({ type: "strin" }), "type", "/properties/v/type"],
    ["empty type array", obj({ type: [] }), "type", "/properties/v/type"],
    ["bad regex", obj({ type: "string", pattern: "(" }), "pattern", "/properties/v/pattern"],
    ["lookahead", obj({ type: "string", pattern: "^(?=a)[a-z]+$" }), "pattern", "/properties/v/pattern"],
    ["lookbehind", obj({ type: "string", pattern: "(?<!a)b" }), "pattern", "/properties/v/pattern"],
    ["backreference", obj({ type: "string", pattern: "^(a)\\1$" }), "pattern", "/properties/v/pattern"],
    ["named backreference", obj({ type: "string", pattern: "^(?<x>a)\\k<x>$" }), "pattern", "/properties/v/pattern"],
    ["unicode property", obj({ type: "string", pattern: "^\\p{L}+$" }), "pattern", "/properties/v/pattern"],
    ["word boundary", obj({ type: "string", pattern: "\\bab" }), "pattern", "/properties/v/pattern"],
    ["unsupported format", obj({ type: "string", format: "idn-email" }), "format", "/properties/v/format"],
    [
      "a length bound beside a format (the format's grammar ignores it)",
      obj({ type: "string", format: "email", maxLength: 32 }),
      "maxLength",
      "/properties/v/maxLength",
    ],
    ["maxLength over 10,000", obj({ type: "string", maxLength: 10_001 }), "maxLength", "/properties/v/maxLength"],
    [
      "maxLength beside a pattern that is not one class repeated (the pattern's grammar ignores it)",
      obj({ type: "string", pattern: "^[a-z]+-[0-9]+$", maxLength: 5 }),
      "maxLength",
      "/properties/v/maxLength",
    ],
    ["minLength beside a pattern", obj({ type: "string", pattern: "^(ab)+$", minLength: 3 }), "minLength", "/properties/v/minLength"],
    ["maxLength over 64 on a string or a number", obj({ type: ["string", "number"], maxLength: 65 }), "maxLength", "/properties/v/maxLength"],
    ["minLength above maxLength", obj({ type: "string", minLength: 5, maxLength: 2 }), "minLength", "/properties/v/minLength"],
    ["maxItems over 10,000", obj({ type: "array", maxItems: 10_001 }), "maxItems", "/properties/v/maxItems"],
    ["maxProperties over 64", obj({ type: "object", maxProperties: 65 }), "maxProperties", "/properties/v/maxProperties"],
    ["tuple items", obj({ type: "array", items: [{ type: "integer" }] }), "items", "/properties/v/items"],
    ["empty enum", obj({ enum: [] }), "enum", "/properties/v/enum"],
    ["empty anyOf", obj({ anyOf: [] }), "anyOf", "/properties/v/anyOf"],
    ["inside anyOf", obj({ anyOf: [{ type: "string" }, { not: {} }] }), "not", "/properties/v/anyOf/1/not"],
    ["inside $defs", { $defs: { A: { type: "array", uniqueItems: true } } }, "uniqueItems", "/$defs/A/uniqueItems"],
    ["inside definitions", { definitions: { A: { type: "number", maximum: 1 } } }, "maximum", "/definitions/A/maximum"],
    ["inside items", obj({ type: "array", items: { type: "integer", multipleOf: 2 } }), "multipleOf", "/properties/v/items/multipleOf"],
    ["inside prefixItems", obj({ type: "array", prefixItems: [{ allOf: [] }] }), "allOf", "/properties/v/prefixItems/0/allOf"],
    ["inside additionalProperties", { type: "object", additionalProperties: { not: {} } }, "not", "/additionalProperties/not"],
    ["property name with slash", { type: "object", properties: { "a/b": { allOf: [] } } }, "allOf", "/properties/a~1b/allOf"],
    ["minItems beyond a closed tuple", obj({ type: "array", prefixItems: [{}], items: false, minItems: 2 }), "minItems", "/properties/v/minItems"],
    [
      "minProperties beyond closed properties",
      obj({ type: "object", minProperties: 1, additionalProperties: false }),
      "minProperties",
      "/properties/v/minProperties",
    ],
    ["false subschema", obj(false), undefined, "/properties/v"],
  ];
  for (const [name, schema, keyword, path] of refused) {
    it(name, () => {
      const e = refusal(schema);
      expect(e.keyword).toBe(keyword);
      expect(e.path).toBe(path);
    });
  }

  it("says why long strings are refused; a plain string's bounds go up to 10,000, a nullable one's too", () => {
    expect(refusal(obj({ type: ["string", "number"], maxLength: 200 })).message).toMatch(/compile time/);
    expect(() => checkJsonSchema(obj({ type: "string", minLength: 100, maxLength: 10_000 }))).not.toThrow();
    expect(() => checkJsonSchema(obj({ type: ["string", "null"], maxLength: 500 }))).not.toThrow();
  });

  it("a schema that is not an object or boolean", () => {
    for (const s of [null, 1, "x", [], false]) expect(refusal(s).path).toBe("");
  });

  it("nesting deeper than 32 levels", () => {
    let s: unknown = { type: "integer" };
    for (let i = 0; i < 33; i++) s = { type: "array", items: s };
    expect(refusal(s).message).toMatch(/deeper than 32/);
  });
});

describe("array item bounds", () => {
  it("the engine holds them exactly, at the counts kiln accepts (its chain of items turns into a repetition past 128)", async () => {
    const ints = (n: number) => JSON.stringify(Array.from({ length: n }, (_, i) => i % 10));
    for (const [min, max] of [
      [0, 128],
      [0, 129],
      [150, 300],
      [0, 10_000],
    ]) {
      const schema = { type: "array", items: { type: "integer" }, minItems: min, maxItems: max };
      expect(() => checkJsonSchema(schema)).not.toThrow();
      const grammar = await acceptor(await schemaEbnf(schema));
      if (min > 0) expect(grammar.accepts(ints(min - 1)), `${min - 1} of ${min}..${max}`).toBe(false);
      expect(grammar.accepts(ints(min)), `${min} of ${min}..${max}`).toBe(true);
      expect(grammar.accepts(ints(max)), `${max} of ${min}..${max}`).toBe(true);
      expect(grammar.accepts(ints(max + 1)), `${max + 1} of ${min}..${max}`).toBe(false);
      grammar.dispose();
    }
  });
});

describe("applyTokenMask", () => {
  it("sets disallowed logits to -Infinity and keeps the rest", () => {
    const logits = Float32Array.from({ length: 70 }, (_, i) => i);
    const mask = new Int32Array(3);
    for (const id of [0, 31, 32, 69]) mask[id >> 5] |= 1 << (id & 31);
    applyTokenMask(logits, mask);
    for (let i = 0; i < 70; i++) expect(logits[i]).toBe([0, 31, 32, 69].includes(i) ? i : -Infinity);
  });

  it("leaves an all-ones word untouched", () => {
    const logits = new Float32Array(32).fill(1);
    applyTokenMask(logits, Int32Array.of(-1));
    expect([...logits].every((x) => x === 1)).toBe(true);
  });
});
