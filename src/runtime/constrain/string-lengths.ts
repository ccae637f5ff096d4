/**
 * Strings with length bounds, written by kiln. The engine's JSON-schema compiler writes a string of
 * at most n characters as a chain of n rules, whose compile time grows with n (about 0.8 s for 64,
 * 6 s for 200 on SmolLM2's vocabulary) and whose characters may be raw control characters. kiln
 * writes the string as one bounded repetition of the characters JSON text holds unescaped, which
 * the engine compiles in at most about 2.4 s whatever the bound, and shares one rule between the
 * strings of a schema with the same bounds (placed-rules.ts). Lengths count characters (code
 * points), as JSON Schema's do; the string holds no escapes. A pattern that is one class repeated
 * (`^[a-z]+$`) beside length bounds is written the same way, the class's counts narrowed by them.
 */
import { engineEbnf } from "./gbnf.js";
import type { PlacedRule } from "./placed-rules.js";
import { schemaPatternProblem, schemaPatternShape, type PatternShape } from "./regex.js";

type Json = Record<string, unknown>;

/** Largest `minLength`/`maxLength` of a string whose bounds kiln writes (a 400 above). */
export const MAX_PLACED_LENGTH = 10_000;

/** One character a JSON string holds unescaped. */
const CHARACTER = String.raw`[^\0-\x1f\"\\]`;

/**
 * Whether kiln writes this subschema's rule: a string (or a string or null) with length bounds and
 * nothing else holding its text but, perhaps, a pattern that is one class repeated, which the
 * bounds narrow (the engine's pattern grammar would ignore them).
 */
export function placesStringLength(node: Json): boolean {
  const has = (k: string) => Object.prototype.hasOwnProperty.call(node, k);
  if (!has("minLength") && !has("maxLength")) return false;
  if (["format", "enum", "const"].some(has)) return false;
  if (has("pattern") && patternBounds(node) === undefined) return false;
  const types = typeof node.type === "string" ? [node.type] : Array.isArray(node.type) ? node.type : [];
  return types.includes("string") && types.every((t) => t === "string" || t === "null") && new Set(types).size === types.length;
}

/**
 * Whether a pattern's own lengths already keep within the node's bounds, so that the engine, which
 * ignores the bounds beside a pattern, holds the string to them anyway. False without a pattern.
 */
export function boundsBesidePatternHold(node: Json): boolean {
  if (typeof node.pattern !== "string" || schemaPatternProblem(node.pattern) !== undefined) return false;
  const shape = schemaPatternShape(node.pattern);
  const min = typeof node.minLength === "number" ? node.minLength : 0;
  const max = typeof node.maxLength === "number" ? node.maxLength : null;
  return shape.min >= min && (max === null || (shape.max !== null && shape.max <= max));
}

/** A pattern that is one class repeated, which the node's bounds narrow: the class and its counts within them; else undefined. */
function patternBounds(node: Json): { shape: Required<PatternShape>["repeated"]; min: number; max: number | null } | undefined {
  if (typeof node.pattern !== "string" || schemaPatternProblem(node.pattern) !== undefined || boundsBesidePatternHold(node)) return undefined;
  const repeated = schemaPatternShape(node.pattern).repeated;
  if (repeated === undefined) return undefined;
  const min = Math.max(repeated.min, typeof node.minLength === "number" ? node.minLength : 0);
  const maxLength = typeof node.maxLength === "number" ? node.maxLength : null;
  const max = repeated.max === null ? maxLength : maxLength === null ? repeated.max : Math.min(repeated.max, maxLength);
  if (max !== null && min > max) return undefined;
  return { shape: repeated, min, max };
}

/** The rule of a string with length bounds (placed-rules.ts), or undefined when kiln leaves the subschema to the engine. */
export function stringLengthRule(node: Json): PlacedRule | undefined {
  if (!placesStringLength(node)) return undefined;
  const types = typeof node.type === "string" ? [node.type] : (node.type as string[]);
  const nullable = (text: string) => (types.includes("null") ? `${text} | "null"` : text);
  const bounded = patternBounds(node);
  if (bounded !== undefined && bounded.max !== 0) {
    const run = engineEbnf({ rules: new Map([["root", [[{ kind: "repeat", item: bounded.shape.item, min: bounded.min, max: bounded.max }]]]]) });
    return { rule: nullable(`"\\"" ${run.replace(/^root ::= /, "")} "\\""`) };
  }
  const min = typeof node.minLength === "number" ? node.minLength : 0;
  const max = bounded?.max === 0 ? 0 : typeof node.maxLength === "number" ? node.maxLength : undefined;
  let run: string;
  if (max === 0) run = "";
  else if (max === undefined) run = min === 0 ? `${CHARACTER}*` : `${CHARACTER}{${min},}`;
  else run = min === max ? `${CHARACTER}{${min}}` : `${CHARACTER}{${min},${max}}`;
  return { rule: nullable(`"\\"" ${run} "\\""`.replace("  ", " ")) };
}
