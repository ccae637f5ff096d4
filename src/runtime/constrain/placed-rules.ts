/**
 * Subschemas whose grammar kiln writes itself, where the engine's JSON-schema compiler writes a
 * wrong one (bounded integers, dates and times). Each such subschema becomes a placeholder constant
 * in the schema handed to the engine (placeRules), and the placeholder's literal in the engine's
 * EBNF becomes kiln's rule (fillRules).
 */

type Json = Record<string, unknown>;

/** What takes a subschema's place: an EBNF rule body for its whole JSON text, or another subschema. */
export type PlacedRule = { rule: string } | { schema: Json };

/** Decides, for each subschema, whether kiln writes it (undefined: the engine does). */
export type RuleOf = (node: Json) => PlacedRule | undefined;

/** A schema with its placed subschemas taken out, as {@link placeRules} gives it. */
export interface PlacedRules {
  /** The schema to hand the engine (a copy; the original is untouched). */
  schema: unknown;
  /** Prefix of the placeholders: the constant of rule n is `${marker}${n}`, which the schema's text does not hold anywhere else. */
  marker: string;
  /** Each placeholder's rule body, by n; subschemas with the same body share one. */
  rules: string[];
}

/**
 * Replaces every subschema `ruleOf` answers for by `{"const": "<marker><n>"}` or by the subschema
 * it gives, keeping `$defs`/`definitions` beside it so that references into them still resolve.
 * Walks every subschema position and every `$ref` target; expects a schema checkJsonSchema accepted.
 */
export function placeRules(schema: unknown, ruleOf: RuleOf): PlacedRules {
  const text = JSON.stringify(schema);
  let marker = "kilnrule";
  for (let k = 0; text.includes(marker); k++) marker = `kilnrule${k}x`;
  const placed: PlacedRules = { schema: structuredClone(schema), marker, rules: [] };
  const top: Json = { root: placed.schema };
  const seen = new WeakSet<object>();

  const visit = (holder: Json | unknown[], key: string | number): void => {
    const node = (holder as Json)[key as string];
    if (!isObject(node) || seen.has(node)) return;
    seen.add(node);
    const placedRule = ruleOf(node);
    if (placedRule !== undefined) {
      let out: Json;
      if ("schema" in placedRule) out = { ...placedRule.schema };
      else {
        let n = placed.rules.indexOf(placedRule.rule);
        if (n < 0) n = placed.rules.push(placedRule.rule) - 1;
        out = { const: marker + n };
      }
      for (const k of ["$defs", "definitions"]) if (Object.prototype.hasOwnProperty.call(node, k)) out[k] = node[k];
      (holder as Json)[key as string] = out;
      for (const k of ["$defs", "definitions"]) if (isObject(node[k])) for (const name of Object.keys(node[k])) visit(node[k], name);
      return;
    }
    if (typeof node.$ref === "string") {
      const target = refHolder(top, node.$ref);
      if (target !== undefined) visit(target[0], target[1]);
    }
    for (const k of ["items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames"]) visit(node, k);
    for (const k of ["prefixItems", "anyOf", "oneOf"]) if (Array.isArray(node[k])) node[k].forEach((_, i) => visit(node[k] as unknown[], i));
    for (const k of ["properties", "$defs", "definitions"]) if (isObject(node[k])) for (const name of Object.keys(node[k])) visit(node[k], name);
  };
  visit(top, "root");
  placed.schema = top.root;
  return placed;
}

/** The engine's EBNF of a placed schema with each placeholder literal replaced by its rule. */
export function fillRules(ebnf: string, placed: PlacedRules): string {
  if (placed.rules.length === 0) return ebnf;
  const rule = (n: string) => `${placed.marker}_${n}`;
  // The placeholder as the engine prints it inside a literal: \"kilnrule7\" (quotes escaped).
  const quoted = String.raw`\\"` + placed.marker + String.raw`(\d+)\\"`;
  const filled = ebnf
    // The placeholder as a whole literal, as the engine prints a constant string on its own...
    .replace(new RegExp(`"${quoted}"`, "g"), (_, n: string) => rule(n))
    // ...or inside a longer literal, which is split around it.
    .replace(new RegExp(quoted, "g"), (_, n: string) => `" ${rule(n)} "`);
  if (new RegExp(placed.marker + "\\d").test(filled)) throw new Error("a placeholder was left in the schema's grammar");
  const rules = placed.rules.map((body, n) => `${rule(String(n))} ::= ${body}`);
  return filled.replace(/\n?$/, "\n") + rules.join("\n") + "\n";
}

/** The object and key a local `$ref` points at (the root: `top.root`), or undefined. */
function refHolder(top: Json, ref: string): [Json | unknown[], string | number] | undefined {
  if (ref === "#") return [top, "root"];
  if (!ref.startsWith("#/")) return undefined;
  let holder: Json | unknown[] = top;
  let key: string | number = "root";
  for (const raw of ref.slice(2).split("/")) {
    const node: unknown = (holder as Json)[key as string];
    let part: string;
    try {
      part = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    } catch {
      return undefined;
    }
    if (Array.isArray(node) && /^(0|[1-9][0-9]*)$/.test(part) && Number(part) < node.length) [holder, key] = [node, Number(part)];
    else if (isObject(node) && Object.prototype.hasOwnProperty.call(node, part)) [holder, key] = [node, part];
    else return undefined;
  }
  return [holder, key];
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
