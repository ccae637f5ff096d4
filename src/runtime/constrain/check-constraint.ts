/**
 * The gate every constraint passes before the engine sees it: plain JS, no WASM. Anything the
 * engine would abort on (which can corrupt its instance), silently ignore or mis-enforce is refused
 * here as a ConstraintError naming the place (a JSON pointer) and the keyword or field at fault.
 *
 * Structural tags are checked against what web-xgrammar 0.1.27's parser and analyzer require
 * (cpp/structural_tag.cc at the commit the package was built from), plus what kiln refuses on top:
 * unknown fields (the engine ignores them), the `qwen_xml_parameter` format, NUL characters (the
 * engine cuts strings at them) and lone surrogates. A `grammar` format, and a grammar constraint,
 * hold GBNF, checked by gbnf.ts; it reaches the engine only as gbnf.ts rewrites it.
 */
import { checkJsonSchema } from "./check-schema.js";
import type { ConstraintSpec } from "./engine.js";
import { ConstraintError } from "./errors.js";
import { engineEbnf, parseGbnf } from "./gbnf.js";
import { regexProblem } from "./regex.js";

/** Deepest nesting of structural-tag formats accepted (schemas inside have their own limit). */
export const MAX_FORMAT_DEPTH = 32;

/** A constraint that passed the gate, parsed, with its cache key (type and canonical content). */
export type CheckedConstraint =
  | { type: "json_object"; key: string }
  | { type: "json_schema"; key: string; schema: unknown }
  | { type: "regex"; key: string; pattern: string }
  | { type: "choice"; key: string; choices: string[] }
  | { type: "grammar"; key: string; ebnf: string }
  | { type: "structural_tag"; key: string; format: Json };

type Json = Record<string, unknown>;

/** Throws ConstraintError when the engine cannot enforce `spec` (pure JS, no WASM); see {@link CheckedConstraint}. */
export function checkConstraint(spec: ConstraintSpec): void {
  checkedConstraint(spec);
}

/** {@link checkConstraint}, returning the parsed constraint. */
export function checkedConstraint(spec: ConstraintSpec): CheckedConstraint {
  switch (spec?.type) {
    case "json_object":
      return { type: "json_object", key: "json_object" };
    case "json_schema": {
      const schema = parseJson(spec.schema, "the schema");
      checkJsonSchema(schema);
      return { type: "json_schema", key: "json_schema:" + JSON.stringify(schema), schema };
    }
    case "regex": {
      if (typeof spec.pattern !== "string") throw new ConstraintError("the pattern must be a string", "", "pattern");
      const problem = regexProblem(spec.pattern);
      if (problem !== undefined) throw new ConstraintError(problem, "", "pattern");
      return { type: "regex", key: "regex:" + spec.pattern, pattern: spec.pattern };
    }
    case "choice": {
      const choices: unknown = spec.choices;
      if (!Array.isArray(choices) || choices.length === 0) throw new ConstraintError("choices must be a non-empty array of strings", "", "choices");
      choices.forEach((c, i) => {
        if (typeof c !== "string") throw new ConstraintError(`choice ${i} is not a string`, `/${i}`, "choices");
        const bad = textProblem(c);
        if (bad) throw new ConstraintError(`choice ${i} holds ${bad}`, `/${i}`, "choices");
      });
      return { type: "choice", key: "choice:" + JSON.stringify(choices), choices: choices as string[] };
    }
    case "grammar": {
      const ebnf = engineEbnf(parseGbnf(spec.grammar));
      return { type: "grammar", key: "grammar:" + ebnf, ebnf };
    }
    case "structural_tag": {
      const format = parseJson(spec.format, "the structural tag format");
      new FormatChecker().check(format, "", 0);
      return { type: "structural_tag", key: "structural_tag:" + JSON.stringify(format), format: format as Json };
    }
    default:
      throw new ConstraintError(`unknown constraint type "${String((spec as { type?: unknown })?.type)}"`, "", "type");
  }
}

function parseJson(text: unknown, what: string): unknown {
  if (typeof text !== "string") throw new ConstraintError(`${what} must be JSON text`, "");
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ConstraintError(`${what} is not valid JSON: ${(e as Error).message}`, "");
  }
}

/** What in a string the engine cannot take, or undefined. */
function textProblem(s: string): string | undefined {
  if (s.includes("\0")) return "a NUL character";
  if (/\p{Cs}/u.test(s)) return "a lone surrogate (not valid Unicode)";
  return undefined;
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function pointer(path: string, ...parts: Array<string | number>): string {
  return path + parts.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");
}

/** Fields of each format kiln accepts: required, then optional. */
const FORMATS: Record<string, { required: string[]; optional: string[] }> = {
  any_text: { required: [], optional: [] },
  const_string: { required: ["value"], optional: [] },
  json_schema: { required: ["json_schema"], optional: [] },
  regex: { required: ["pattern"], optional: [] },
  grammar: { required: ["grammar"], optional: [] },
  sequence: { required: ["elements"], optional: [] },
  or: { required: ["elements"], optional: [] },
  tag: { required: ["begin", "content", "end"], optional: [] },
  triggered_tags: { required: ["triggers", "tags"], optional: ["at_least_one", "stop_after_first"] },
  tags_with_separator: { required: ["tags", "separator"], optional: ["at_least_one", "stop_after_first"] },
};

const REFUSED_FORMATS: Record<string, string> = {
  qwen_xml_parameter: "qwen_xml_parameter is not supported",
  structural_tag: 'pass the format itself, not the {"type": "structural_tag", "format": ...} wrapper',
};

/**
 * Walks a format the way the engine's parser and analyzer do. "Unlimited" formats (free text,
 * triggered tags, tags with a separator, and sequences/ors ending in them) end only where something
 * outside them says, so the engine allows them only last in a sequence, and inside a tag only with
 * a non-empty end.
 */
class FormatChecker {
  /** Checks the format at `path`; returns whether it is unlimited. */
  check(node: unknown, path: string, depth: number, tagItem = false): boolean {
    if (depth > MAX_FORMAT_DEPTH) throw new ConstraintError(`formats nest deeper than ${MAX_FORMAT_DEPTH} levels`, path);
    if (!isObject(node)) throw new ConstraintError("a format must be an object", path);
    const fail = (key: string, message: string): never => {
      throw new ConstraintError(`${key}: ${message}`, pointer(path, key), key);
    };
    let type = node.type;
    // The engine reads the items of `tags` as tags whether they say so or not.
    if (type === undefined && tagItem) type = "tag";
    if (typeof type !== "string") fail("type", `must be one of ${Object.keys(FORMATS).join(", ")}`);
    if (tagItem && type !== "tag") fail("type", `the items of "tags" are tags (type "tag"), not "${String(type)}"`);
    const refused = Object.prototype.hasOwnProperty.call(REFUSED_FORMATS, type as string) ? REFUSED_FORMATS[type as string] : undefined;
    if (refused !== undefined) fail("type", refused);
    const fields = Object.prototype.hasOwnProperty.call(FORMATS, type as string) ? FORMATS[type as string] : undefined;
    if (fields === undefined) return fail("type", `unknown format type "${String(type)}" (supported: ${Object.keys(FORMATS).join(", ")})`);
    for (const k of Object.keys(node)) {
      if (k !== "type" && !fields.required.includes(k) && !fields.optional.includes(k)) fail(k, `unknown field in a ${type as string} format`);
    }
    for (const k of fields.required) if (!Object.prototype.hasOwnProperty.call(node, k)) fail(k, `a ${type as string} format needs "${k}"`);
    for (const k of ["at_least_one", "stop_after_first"]) if (k in node && typeof node[k] !== "boolean") fail(k, "must be a boolean");

    const text = (key: string, nonEmpty: boolean): string => {
      const v = node[key];
      if (typeof v !== "string") return fail(key, "must be a string");
      if (nonEmpty && v.length === 0) fail(key, "must not be empty");
      const bad = textProblem(v);
      if (bad) fail(key, `holds ${bad}`);
      return v;
    };
    const list = (key: string): unknown[] => {
      const v = node[key];
      if (!Array.isArray(v) || v.length === 0) return fail(key, "must be a non-empty array");
      return v;
    };

    switch (type) {
      case "any_text":
        return true;
      case "const_string":
        text("value", true);
        return false;
      case "regex": {
        const problem = regexProblem(text("pattern", true));
        if (problem !== undefined) fail("pattern", problem);
        return false;
      }
      case "grammar": {
        const grammar = text("grammar", true);
        try {
          parseGbnf(grammar);
        } catch (e) {
          if (!(e instanceof ConstraintError)) throw e;
          fail("grammar", e.message);
        }
        return false;
      }
      case "json_schema": {
        const schema = node.json_schema;
        if (schema !== true && !isObject(schema)) fail("json_schema", "must be a JSON schema (an object, or true)");
        try {
          checkJsonSchema(schema);
        } catch (e) {
          if (!(e instanceof ConstraintError)) throw e;
          throw new ConstraintError(e.message, pointer(path, "json_schema") + e.path, e.keyword ?? "json_schema");
        }
        return false;
      }
      case "sequence": {
        const kinds = list("elements").map((e, i) => this.check(e, pointer(path, "elements", i), depth + 1));
        const early = kinds.findIndex((unlimited, i) => unlimited && i < kinds.length - 1);
        if (early >= 0) {
          throw new ConstraintError(
            "elements: only the last element of a sequence may be unlimited (any_text, triggered_tags, tags_with_separator, or what ends in one)",
            pointer(path, "elements", early),
            "elements",
          );
        }
        return kinds[kinds.length - 1];
      }
      case "or": {
        const kinds = list("elements").map((e, i) => this.check(e, pointer(path, "elements", i), depth + 1));
        if (kinds.some((k) => k) && !kinds.every((k) => k)) fail("elements", "the elements of an or must be all unlimited or all limited");
        return kinds[0];
      }
      case "tag": {
        text("begin", false);
        text("end", false);
        const unlimited = this.check(node.content, pointer(path, "content"), depth + 1);
        if (unlimited && node.end === "") fail("end", "must not be empty when the content is unlimited (it is where the content ends)");
        return false;
      }
      case "triggered_tags": {
        const triggers = list("triggers").map((t, i) => {
          if (typeof t !== "string" || t.length === 0)
            throw new ConstraintError("triggers: must be non-empty strings", pointer(path, "triggers", i), "triggers");
          const bad = textProblem(t);
          if (bad) throw new ConstraintError(`triggers: holds ${bad}`, pointer(path, "triggers", i), "triggers");
          return t;
        });
        const used = new Set<number>();
        list("tags").forEach((tag, i) => {
          const here = pointer(path, "tags", i);
          this.check(tag, here, depth + 1, true);
          const begin = (tag as Json).begin as string;
          const matched = triggers.flatMap((t, j) => (begin.startsWith(t) ? [j] : []));
          if (matched.length === 0)
            throw new ConstraintError(`begin: ${JSON.stringify(begin)} starts with none of the triggers`, pointer(here, "begin"), "begin");
          if (matched.length > 1) {
            throw new ConstraintError(
              `begin: ${JSON.stringify(begin)} starts with more than one trigger (${matched.map((j) => JSON.stringify(triggers[j])).join(", ")})`,
              pointer(here, "begin"),
              "begin",
            );
          }
          used.add(matched[0]);
        });
        triggers.forEach((t, j) => {
          if (!used.has(j)) throw new ConstraintError(`triggers: no tag begins with ${JSON.stringify(t)}`, pointer(path, "triggers", j), "triggers");
        });
        return true;
      }
      case "tags_with_separator": {
        text("separator", true);
        list("tags").forEach((tag, i) => this.check(tag, pointer(path, "tags", i), depth + 1, true));
        return true;
      }
    }
    return false;
  }
}
