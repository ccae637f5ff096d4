/**
 * What kiln's constrained-decoding engine (web-xgrammar 0.1.27) enforces of JSON Schema, checked in
 * plain JS before the schema reaches the engine. Every engine error is a WASM abort that can corrupt
 * the instance, and several keywords are silently ignored by it, so anything the engine would
 * ignore, mis-enforce or die on is refused here with the keyword and its place.
 */
import { ConstraintError } from "./errors.js";
import { schemaPatternProblem } from "./regex.js";
import { boundsBesidePatternHold, MAX_PLACED_LENGTH, placesStringLength } from "./string-lengths.js";

/**
 * Longest string bound accepted where the engine writes the string's grammar: its compile time
 * grows steeply with the bound (maxLength 64 ≈ 0.8 s, 200 ≈ 6 s on SmolLM2's vocabulary). A plain
 * string's bounds go up to {@link MAX_PLACED_LENGTH}: kiln writes those (string-lengths.ts).
 */
export const MAX_LENGTH_BOUND = 64;
/**
 * Most items an array's bounds may name. The engine holds them exactly and compiles them fast (a
 * chain of item references, repeated past 128: maxItems 5,000 in 17 ms on SmolLM2's vocabulary).
 */
export const MAX_ITEMS_BOUND = 10_000;
/** Most properties an object's bounds may name. */
export const MAX_PROPERTIES_BOUND = 64;
/** Deepest schema nesting accepted. */
export const MAX_SCHEMA_DEPTH = 32;

const TYPES = new Set(["string", "number", "integer", "boolean", "object", "array", "null"]);

/** Formats the engine turns into a grammar (others it silently ignores). */
export const SUPPORTED_FORMATS: ReadonlySet<string> = new Set([
  "date",
  "time",
  "date-time",
  "duration",
  "email",
  "hostname",
  "ipv4",
  "ipv6",
  "uri",
  "uri-reference",
  "uri-template",
  "uuid",
  "json-pointer",
]);

/** Keywords the engine accepts and ignores: the output would not be held to them. */
const UNENFORCED: Record<string, string> = {
  allOf: "allOf is not enforced; merge the subschemas into one",
  not: "not is not enforced",
  if: "if/then/else is not enforced",
  then: "if/then/else is not enforced",
  else: "if/then/else is not enforced",
  uniqueItems: "uniqueItems is not enforced",
  contains: "contains is not enforced",
  minContains: "minContains is not enforced",
  maxContains: "maxContains is not enforced",
  multipleOf: "multipleOf is not enforced",
  dependentRequired: "dependentRequired is not enforced",
  dependentSchemas: "dependentSchemas is not enforced",
  dependencies: "dependencies is not enforced",
  patternProperties: "patternProperties is not supported (the engine rejects valid property names)",
  $dynamicRef: "$dynamicRef is not supported",
  $recursiveRef: "$recursiveRef is not supported",
  $anchor: "$anchor is not supported; use $defs and #/$defs/... references",
  $dynamicAnchor: "$dynamicAnchor is not supported",
  contentSchema: "contentSchema is not enforced",
};

const NUMBER_BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] as const;

/**
 * Keywords that constrain a value; beside a `$ref` they would be ignored (the engine follows the
 * reference only).
 */
const CONSTRAINING = new Set([
  "type",
  "enum",
  "const",
  "properties",
  "required",
  "additionalProperties",
  "unevaluatedProperties",
  "items",
  "prefixItems",
  "unevaluatedItems",
  "minItems",
  "maxItems",
  "minProperties",
  "maxProperties",
  "propertyNames",
  "anyOf",
  "oneOf",
  "minLength",
  "maxLength",
  "pattern",
  "format",
  ...NUMBER_BOUNDS,
]);

/** Checks a parsed JSON schema against what kiln enforces (pure JS, no WASM); throws ConstraintError naming the keyword and where. */
export function checkJsonSchema(schema: unknown): void {
  if (schema === false) throw new ConstraintError("the schema `false` allows no value", "");
  if (schema !== true && !isObject(schema)) throw new ConstraintError("a JSON schema must be an object or a boolean", "");
  const checker = new Checker(schema);
  checker.check(schema, "", 0);
  checker.refuseEndless();
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function pointer(path: string, ...parts: Array<string | number>): string {
  return path + parts.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");
}

class Checker {
  constructor(private readonly root: Json | true) {}

  check(node: unknown, path: string, depth: number, falseAllowed = false): void {
    if (depth > MAX_SCHEMA_DEPTH) throw new ConstraintError(`the schema nests deeper than ${MAX_SCHEMA_DEPTH} levels`, path);
    if (node === true) return;
    if (node === false) {
      if (falseAllowed) return;
      throw new ConstraintError("the schema `false` allows no value here", path);
    }
    if (!isObject(node)) throw new ConstraintError("a subschema must be an object or a boolean", path);
    const fail = (keyword: string, message: string): never => {
      throw new ConstraintError(`${keyword}: ${message}`, pointer(path, keyword), keyword);
    };

    for (const keyword of Object.keys(node)) {
      const why = UNENFORCED[keyword];
      if (why !== undefined) fail(keyword, why);
    }
    const has = (k: string) => Object.prototype.hasOwnProperty.call(node, k);

    // $ref: local and resolvable only; nothing that constrains beside it.
    if (has("$ref")) {
      const ref = node.$ref;
      if (typeof ref !== "string") fail("$ref", "must be a string");
      this.resolve(ref as string, pointer(path, "$ref"));
      this.refuseEmptyCycle(node, pointer(path, "$ref"));
      for (const k of Object.keys(node)) {
        if (CONSTRAINING.has(k)) fail(k, "keywords beside $ref are not enforced; move them into the referenced schema");
      }
    }

    // type
    let types: string[] | undefined;
    if (has("type")) {
      const t = node.type;
      types = typeof t === "string" ? [t] : Array.isArray(t) ? (t as unknown[]).map(String) : undefined;
      if (types === undefined || (Array.isArray(t) && (t.length === 0 || t.some((x) => typeof x !== "string")))) {
        fail("type", "must be a type name or a non-empty array of type names");
      }
      for (const name of types!) if (!TYPES.has(name)) fail("type", `unknown type "${name}"`);
    }

    // numeric bounds: integers only (the engine bounds only the integer part of a number)
    const bounds = NUMBER_BOUNDS.filter(has);
    if (bounds.length > 0) {
      const integerOnly = types !== undefined && types.length > 0 && types.every((x) => x === "integer");
      if (!integerOnly) fail(bounds[0], 'numeric bounds are enforced only with type "integer"');
      let lo = -Infinity;
      let hi = Infinity;
      for (const k of bounds) {
        const v = node[k];
        if (typeof v !== "number" || !Number.isSafeInteger(v)) fail(k, "must be an integer between -(2^53-1) and 2^53-1");
        const n = v as number;
        if (k === "minimum") lo = Math.max(lo, n);
        if (k === "exclusiveMinimum") lo = Math.max(lo, n + 1);
        if (k === "maximum") hi = Math.min(hi, n);
        if (k === "exclusiveMaximum") hi = Math.min(hi, n - 1);
      }
      if (lo > hi) fail(bounds[bounds.length - 1], "the bounds leave no integer");
      // Beside anyOf/oneOf the engine enforces the alternatives alone; kiln keeps only the listed
      // integers within the bounds of an enum or const (int-range.ts), which must leave one.
      for (const k of ["anyOf", "oneOf"]) if (has(k)) fail(bounds[0], `numeric bounds beside ${k} are not enforced; put them in the integer alternatives`);
      const listed = has("const") ? [node.const] : has("enum") && Array.isArray(node.enum) ? (node.enum as unknown[]) : undefined;
      if (
        listed !== undefined &&
        !listed.some((v) => typeof v === "number" && Number.isInteger(v) && v >= lo && v <= hi && (!has("enum") || (node.enum as unknown[]).includes(v)))
      ) {
        fail(has("const") ? "const" : "enum", "no listed value is an integer within the bounds");
      }
    }

    // strings
    // kiln writes a plain string's bounds as one repetition, whose compile time stays flat; the engine's own grow with the bound.
    const placed = placesStringLength(node) || boundsBesidePatternHold(node);
    this.countPair(node, path, "minLength", "maxLength", placed ? MAX_PLACED_LENGTH : MAX_LENGTH_BOUND, "string length");
    if (has("pattern")) {
      if (typeof node.pattern !== "string") fail("pattern", "must be a string");
      const problem = patternProblem(node.pattern as string);
      if (problem !== undefined) fail("pattern", problem);
      // The engine's pattern grammar replaces the string rule, length bounds and all: they stand only
      // where the pattern keeps within them anyway, or where kiln writes the string (one class repeated).
      if (!boundsBesidePatternHold(node) && !placesStringLength(node))
        for (const k of ["minLength", "maxLength"])
          if (has(k))
            fail(
              k,
              `cannot be combined with this "pattern" (the pattern's grammar would ignore it; kiln holds bounds beside a pattern that is one class repeated, such as ^[a-z]+$); write the length into the pattern, as {1,20}`,
            );
    }
    if (has("format")) {
      if (typeof node.format !== "string") fail("format", "must be a string");
      if (!SUPPORTED_FORMATS.has(node.format as string)) {
        fail("format", `format "${String(node.format)}" is not enforced (supported: ${[...SUPPORTED_FORMATS].join(", ")})`);
      }
      // The engine's format grammars replace the string rule: beside a format, length bounds and patterns would be ignored.
      for (const k of ["minLength", "maxLength", "pattern"])
        if (has(k)) fail(k, `cannot be combined with "format" (the format's grammar would ignore it); use a pattern alone`);
    }

    // arrays
    this.countPair(node, path, "minItems", "maxItems", MAX_ITEMS_BOUND, "array length");
    if (has("items")) {
      if (Array.isArray(node.items)) fail("items", "the array form of items is not supported; use prefixItems");
      this.check(node.items, pointer(path, "items"), depth + 1, true);
    }
    if (has("prefixItems")) {
      const list = node.prefixItems;
      if (!Array.isArray(list) || list.length === 0) fail("prefixItems", "must be a non-empty array of schemas");
      (list as unknown[]).forEach((s, i) => this.check(s, pointer(path, "prefixItems", i), depth + 1));
    }
    if (node.items === false && has("minItems")) {
      const fixed = Array.isArray(node.prefixItems) ? node.prefixItems.length : 0;
      if ((node.minItems as number) > fixed) fail("minItems", `items is false, so no more than ${fixed} items can be given`);
    }
    if (has("unevaluatedItems")) this.check(node.unevaluatedItems, pointer(path, "unevaluatedItems"), depth + 1, true);

    // objects
    if (has("properties")) {
      if (!isObject(node.properties)) fail("properties", "must be an object of schemas");
      for (const [name, s] of Object.entries(node.properties as Json)) this.check(s, pointer(path, "properties", name), depth + 1);
    }
    if (has("required")) {
      const r = node.required;
      if (!Array.isArray(r) || r.some((x) => typeof x !== "string")) fail("required", "must be an array of property names");
    }
    if (has("additionalProperties")) this.check(node.additionalProperties, pointer(path, "additionalProperties"), depth + 1, true);
    if (has("unevaluatedProperties")) this.check(node.unevaluatedProperties, pointer(path, "unevaluatedProperties"), depth + 1, true);
    if (has("propertyNames")) this.check(node.propertyNames, pointer(path, "propertyNames"), depth + 1);
    this.countPair(node, path, "minProperties", "maxProperties", MAX_PROPERTIES_BOUND, "property count");
    if (node.additionalProperties === false && has("minProperties")) {
      const listed = isObject(node.properties) ? Object.keys(node.properties).length : 0;
      if ((node.minProperties as number) > listed) fail("minProperties", `additionalProperties is false, so no more than ${listed} properties can be given`);
    }

    // alternatives and values
    for (const k of ["anyOf", "oneOf"]) {
      if (!has(k)) continue;
      const list = node[k];
      if (!Array.isArray(list) || list.length === 0) fail(k, "must be a non-empty array of schemas");
      (list as unknown[]).forEach((s, i) => this.check(s, pointer(path, k, i), depth + 1));
    }
    if (has("enum") && (!Array.isArray(node.enum) || node.enum.length === 0)) fail("enum", "must be a non-empty array");

    // definitions (checked even when unused: a reference may reach them)
    for (const k of ["$defs", "definitions"]) {
      if (!has(k)) continue;
      if (!isObject(node[k])) fail(k, "must be an object of schemas");
      for (const [name, s] of Object.entries(node[k] as Json)) this.check(s, pointer(path, k, name), depth + 1);
    }
  }

  /** A min/max pair of counts: non-negative integers, min ≤ max, max ≤ limit. */
  private countPair(node: Json, path: string, minKey: string, maxKey: string, limit: number, what: string): void {
    const get = (k: string): number | undefined => {
      if (!Object.prototype.hasOwnProperty.call(node, k)) return undefined;
      const v = node[k];
      if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
        throw new ConstraintError(`${k}: must be a non-negative integer`, pointer(path, k), k);
      }
      if (v > limit) {
        throw new ConstraintError(
          `${k}: ${what} bounds over ${limit} are not supported (the grammar's compile time grows steeply with the bound)`,
          pointer(path, k),
          k,
        );
      }
      return v;
    };
    const min = get(minKey);
    const max = get(maxKey);
    if (min !== undefined && max !== undefined && min > max) {
      throw new ConstraintError(`${minKey}: ${minKey} ${min} is above ${maxKey} ${max}`, pointer(path, minKey), minKey);
    }
  }

  /** Schemas already known to reach no reference cycle before a value begins. */
  private readonly acyclic = new Set<Json>();

  /**
   * Throws when following `$ref`s and `anyOf`/`oneOf` alternatives from `start` comes back to a
   * schema on the way before any value has begun (`{"$defs":{"a":{"$ref":"#/$defs/a"}}}`): such a
   * schema describes no value, and the engine, left to expand it, never finishes. A reference
   * inside `properties` or `items` (a tree) is fine: a `{` or `[` comes first.
   */
  private refuseEmptyCycle(start: Json, path: string): void {
    const onPath = new Set<Json>();
    const visit = (node: Json): void => {
      if (this.acyclic.has(node)) return;
      if (onPath.has(node)) {
        throw new ConstraintError(
          `$ref: "${String(start.$ref)}" leads back to itself before any value begins (a cyclic reference describes no value)`,
          path,
          "$ref",
        );
      }
      onPath.add(node);
      const next: unknown[] = [];
      if (typeof node.$ref === "string") {
        try {
          next.push(this.resolve(node.$ref, path));
        } catch {
          // A reference that does not resolve is refused where it stands, by its own check.
        }
      }
      for (const k of ["anyOf", "oneOf"]) if (Array.isArray(node[k])) next.push(...(node[k] as unknown[]));
      for (const n of next) if (isObject(n)) visit(n);
      onPath.delete(node);
      this.acyclic.add(node);
    };
    visit(start);
  }

  /**
   * Throws when no value the schema allows ends: every one must hold another value of a schema
   * on the way, through required properties or an array's `minItems`, without end
   * (`{"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]}`). The engine would
   * write such a value until the tokens run out. Found as the least set of subschemas that have an
   * ending value, grown until nothing is added; a schema whose type is not pinned to objects and
   * arrays counts as ending (some other value ends), as does anything the check does not follow.
   */
  refuseEndless(): void {
    const nodes = new Set<Json>();
    const collect = (node: unknown): void => {
      if (!isObject(node) || nodes.has(node)) return;
      nodes.add(node);
      for (const [k, v] of Object.entries(node)) {
        if (k === "properties" || k === "$defs" || k === "definitions") for (const sub of isObject(v) ? Object.values(v) : []) collect(sub);
        else if (k === "anyOf" || k === "oneOf" || k === "prefixItems") for (const sub of Array.isArray(v) ? v : []) collect(sub);
        else if (k === "items" || k === "additionalProperties") collect(v);
        else if (k === "$ref" && typeof v === "string") collect(this.resolve(v, ""));
      }
    };
    collect(this.root);
    const ending = new Set<Json>();
    const endsNow = (node: unknown): boolean => node === true || (isObject(node) && ending.has(node));
    for (let grew = true; grew; ) {
      grew = false;
      for (const node of nodes) {
        if (!ending.has(node) && this.blockingPart(node, endsNow) === null) {
          ending.add(node);
          grew = true;
        }
      }
    }
    if (this.root === true || ending.has(this.root)) return;
    // Name the way round: from the root, the first part that cannot end, until one comes back.
    const steps: string[] = [];
    const seen = new Set<Json>();
    let node: unknown = this.root;
    while (isObject(node) && !seen.has(node) && steps.length < 8) {
      seen.add(node);
      const part = this.blockingPart(node, endsNow);
      if (part === null) break;
      if (part.label !== "") steps.push(part.label);
      node = part.next;
    }
    const way = steps.join(" → ");
    throw new ConstraintError(
      node === false
        ? `no value it allows can be written: ${way} has a schema that allows no value (additionalProperties or items false)`
        : `no value it allows ends: ${way} must hold another such value, without end; make one of them optional, or give it an alternative that ends`,
      "",
      "required",
    );
  }

  /**
   * What keeps `node` from having an ending value, given which subschemas have one (`ends`): the
   * part that cannot end, named for the message, and its schema; null when nothing does.
   */
  private blockingPart(node: Json, ends: (schema: unknown) => boolean): { label: string; next: unknown } | null {
    if (typeof node.$ref === "string") {
      const target = this.resolve(node.$ref, "");
      return ends(target) ? null : { label: "", next: target };
    }
    for (const k of ["anyOf", "oneOf"]) {
      const alternatives = node[k];
      if (Array.isArray(alternatives)) return alternatives.some(ends) ? null : { label: `every alternative of ${k}`, next: alternatives[0] };
    }
    if ("enum" in node || "const" in node) return null;
    const types = typeof node.type === "string" ? [node.type] : Array.isArray(node.type) ? (node.type as string[]) : null;
    if (types === null || types.some((t) => t !== "object" && t !== "array")) return null;
    let blocked: { label: string; next: unknown } | null = null;
    for (const type of types) {
      blocked = type === "object" ? this.blockingProperty(node, ends) : this.blockingItem(node, ends);
      if (blocked === null) return null;
    }
    return blocked;
  }

  private blockingProperty(node: Json, ends: (schema: unknown) => boolean): { label: string; next: unknown } | null {
    const properties = isObject(node.properties) ? node.properties : {};
    for (const name of Array.isArray(node.required) ? (node.required as string[]) : []) {
      const schema = Object.prototype.hasOwnProperty.call(properties, name) ? properties[name] : (node.additionalProperties ?? true);
      if (!ends(schema)) return { label: `required property "${name}"`, next: schema };
    }
    return null;
  }

  private blockingItem(node: Json, ends: (schema: unknown) => boolean): { label: string; next: unknown } | null {
    const min = typeof node.minItems === "number" ? node.minItems : 0;
    const prefix = Array.isArray(node.prefixItems) ? node.prefixItems : [];
    for (let i = 0; i < Math.min(min, prefix.length + 1); i++) {
      const schema = i < prefix.length ? prefix[i] : (node.items ?? true);
      if (!ends(schema)) return { label: `item ${i} (minItems ${min})`, next: schema };
    }
    return null;
  }

  /** Follows a local reference to its schema; throws if it is external or does not resolve to a schema. */
  private resolve(ref: string, path: string): Json | true {
    const fail = (message: string): never => {
      throw new ConstraintError(`$ref: ${message}`, path, "$ref");
    };
    if (ref === "#") return this.root;
    if (!ref.startsWith("#/")) fail(`"${ref}" is not a local reference (only "#" and "#/..." are supported)`);
    let target: unknown = this.root;
    for (const raw of ref.slice(2).split("/")) {
      let part: string;
      try {
        part = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
      } catch {
        return fail(`"${ref}" is not a valid JSON pointer`);
      }
      if (Array.isArray(target) && /^(0|[1-9][0-9]*)$/.test(part) && Number(part) < target.length) target = target[Number(part)];
      else if (isObject(target) && Object.prototype.hasOwnProperty.call(target, part)) target = target[part];
      else fail(`"${ref}" does not resolve inside the schema`);
    }
    if (target !== true && !isObject(target)) fail(`"${ref}" does not point at a schema`);
    return target as Json | true;
  }
}

/** Why the engine cannot take this regular expression (a schema's `pattern`), or undefined when it can. */
export function patternProblem(pattern: string): string | undefined {
  return schemaPatternProblem(pattern);
}
