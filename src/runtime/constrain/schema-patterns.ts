/**
 * A JSON schema as the engine's JSON-schema compiler must be given it for its `pattern`s: each
 * rewritten by {@link schemaEnginePattern} (classes with non-ASCII members written out), in every
 * subschema, and nowhere else (a `const`, `enum`, `default` or `examples` value is data, not schema).
 */
import { schemaEnginePattern } from "./regex.js";

type Json = Record<string, unknown>;

/** Keys whose value is one subschema. */
const ONE = ["items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "contains", "not", "if", "then", "else"];
/** Keys whose value is a list of subschemas. */
const LIST = ["prefixItems", "anyOf", "oneOf", "allOf"];
/** Keys whose value maps names to subschemas. */
const MAP = ["properties", "patternProperties", "dependentSchemas", "$defs", "definitions"];

/** A copy of `schema` with every subschema's `pattern` as the engine reads it right; `schema` itself unchanged. */
export function withEnginePatterns(schema: unknown): unknown {
  const copy = structuredClone(schema);
  const seen = new WeakSet<object>();
  const visit = (node: unknown): void => {
    if (!isObject(node) || seen.has(node)) return;
    seen.add(node);
    if (typeof node.pattern === "string") node.pattern = schemaEnginePattern(node.pattern);
    for (const k of ONE) visit(node[k]);
    for (const k of LIST) if (Array.isArray(node[k])) for (const sub of node[k]) visit(sub);
    for (const k of MAP) if (isObject(node[k])) for (const sub of Object.values(node[k])) visit(sub);
  };
  visit(copy);
  return copy;
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
