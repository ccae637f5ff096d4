import { describe, expect, it } from "vitest";
import { withEnginePatterns } from "../../../../src/runtime/constrain/schema-patterns.js";

describe("withEnginePatterns", () => {
  it("rewrites the pattern of every subschema, and no value that is data", () => {
    const schema = {
      type: "object",
      pattern: "[é]",
      properties: { a: { type: "string", pattern: "^[aé]$" }, pattern: { const: { pattern: "[é]" } } },
      items: { anyOf: [{ pattern: "[ü]" }, { enum: [{ pattern: "[é]" }] }] },
      $defs: { D: { type: "array", prefixItems: [{ pattern: "[ö]x" }], default: { pattern: "[é]" } } },
    };
    const before = structuredClone(schema);
    expect(withEnginePatterns(schema)).toEqual({
      type: "object",
      pattern: "(?:é)",
      properties: { a: { type: "string", pattern: "^(?:[a]|é)$" }, pattern: { const: { pattern: "[é]" } } },
      items: { anyOf: [{ pattern: "(?:ü)" }, { enum: [{ pattern: "[é]" }] }] },
      $defs: { D: { type: "array", prefixItems: [{ pattern: "(?:ö)x" }], default: { pattern: "[é]" } } },
    });
    expect(schema).toEqual(before);
  });
});
