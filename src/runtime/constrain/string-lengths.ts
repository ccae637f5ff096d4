/**
 * Strings with length bounds, written by kiln. The engine's JSON-schema compiler writes a string of
 * at most n characters as a chain of n rules, whose compile time grows with n (about 0.8 s for 64,
 * 6 s for 200 on SmolLM2's vocabulary) and whose characters may be raw control characters. kiln
 * writes the string as one bounded repetition of the characters JSON text holds unescaped, which
 * the engine compiles in at most about 2.4 s whatever the bound, and shares one rule between the
 * strings of a schema with the same bounds (placed-rules.ts). Lengths count characters (code
 * points), as JSON Schema's do; the string holds no escapes.
 */
import type { PlacedRule } from "./placed-rules.js";

type Json = Record<string, unknown>;

/** Largest `minLength`/`maxLength` of a string whose bounds kiln writes (a 400 above). */
export const MAX_PLACED_LENGTH = 10_000;

/** One character a JSON string holds unescaped. */
const CHARACTER = String.raw`[^\0-\x1f\"\\]`;

/** Whether kiln writes this subschema's rule: a string (or a string or null) with length bounds and nothing else holding its text. */
export function placesStringLength(node: Json): boolean {
  const has = (k: string) => Object.prototype.hasOwnProperty.call(node, k);
  if (!has("minLength") && !has("maxLength")) return false;
  if (["pattern", "format", "enum", "const"].some(has)) return false;
  const types = typeof node.type === "string" ? [node.type] : Array.isArray(node.type) ? node.type : [];
  return types.includes("string") && types.every((t) => t === "string" || t === "null") && new Set(types).size === types.length;
}

/** The rule of a string with length bounds (placed-rules.ts), or undefined when kiln leaves the subschema to the engine. */
export function stringLengthRule(node: Json): PlacedRule | undefined {
  if (!placesStringLength(node)) return undefined;
  const min = typeof node.minLength === "number" ? node.minLength : 0;
  const max = typeof node.maxLength === "number" ? node.maxLength : undefined;
  let run: string;
  if (max === 0) run = "";
  else if (max === undefined) run = min === 0 ? `${CHARACTER}*` : `${CHARACTER}{${min},}`;
  else run = min === max ? `${CHARACTER}{${min}}` : `${CHARACTER}{${min},${max}}`;
  const text = `"\\"" ${run} "\\""`.replace("  ", " ");
  const types = typeof node.type === "string" ? [node.type] : (node.type as string[]);
  return { rule: types.includes("null") ? `${text} | "null"` : text };
}
