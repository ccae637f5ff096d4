/**
 * Exact EBNF for ranges of JSON integers. web-xgrammar 0.1.27's JSON-schema compiler builds wrong
 * rules for some ranges (`[0,120]` comes out as `"1" [0-2] [0-9]` among others, letting 121..129
 * through, and splitting the range into anyOf parts does not reliably help), so kiln never lets it
 * see a bounded integer: each one becomes a placeholder constant in the schema handed to the
 * engine (placeIntegerRanges), and its literal in the engine's EBNF becomes a rule kiln writes
 * (fillIntegerRanges).
 */

/**
 * The body of an EBNF rule matching exactly the canonical JSON texts of the integers in [min, max]
 * (null: unbounded on that side): no leading zeros, no "-0", "-" only before a negative. The rule
 * holds O(digits) alternatives, nested by common digit prefix.
 */
export function integerRangeEbnf(min: bigint | number | null, max: bigint | number | null): string {
  const lo = min === null ? null : toBigInt(min, "min");
  const hi = max === null ? null : toBigInt(max, "max");
  if (lo !== null && hi !== null && lo > hi) throw new RangeError(`empty integer range [${lo}, ${hi}]`);
  const parts: string[] = [];
  if (lo === null || lo < 0n) {
    // Negatives mirror onto [|hi|, |lo|] behind a "-"; starting at 1 keeps "-0" out.
    const from = hi !== null && hi < 0n ? -hi : 1n;
    parts.push(`"-" (${naturals(from, lo === null ? null : -lo)})`);
  }
  if (hi === null || hi >= 0n) parts.push(naturals(lo === null || lo < 0n ? 0n : lo, hi));
  return alternatives(parts);
}

function toBigInt(v: bigint | number, name: string): bigint {
  if (typeof v === "bigint") return v;
  if (!Number.isInteger(v)) throw new RangeError(`${name} ${v} is not an integer`);
  return BigInt(v);
}

/** [a, b] for 0 ≤ a (b null: unbounded), one group per digit count. */
function naturals(a: bigint, b: bigint | null): string {
  const first = String(a);
  const la = first.length;
  const lb = b === null ? Infinity : String(b).length;
  const parts = [sameLength(first, la === lb ? String(b) : "9".repeat(la))];
  if (b === null) {
    parts.push(`[1-9] [0-9]{${la},}`);
  } else if (lb > la) {
    // Every number of la+1 .. lb-1 digits, then the partial top length from 10^(lb-1).
    if (lb - la >= 2) parts.push(`[1-9] ${digits(la, lb - 2)}`);
    parts.push(sameLength("1" + "0".repeat(lb - 1), String(b)));
  }
  return alternatives(parts);
}

/** [lo, hi] for digit strings of one length, lo ≤ hi, without leading zeros unless the length is 1. */
function sameLength(lo: string, hi: string): string {
  let p = 0;
  while (p < lo.length && lo[p] === hi[p]) p++;
  if (p === lo.length) return literal(lo);
  const prefix = p > 0 ? literal(lo.slice(0, p)) + " " : "";
  const l = lo.slice(p);
  const h = hi.slice(p);
  const n = l.length;
  if (n === 1) return prefix + digitClass(+l, +h);
  const restLo = l.slice(1);
  const restHi = h.slice(1);
  // First digits strictly between l[0] and h[0] take any tail; an edge digit whose tail bound is
  // already the extreme (…000 below, …999 above) joins them.
  let midLo = +l[0] + 1;
  let midHi = +h[0] - 1;
  const parts: string[] = [];
  if (/^0*$/.test(restLo)) midLo--;
  else parts.push(`${literal(l[0])} (${sameLength(restLo, "9".repeat(n - 1))})`);
  let top: string | undefined;
  if (/^9*$/.test(restHi)) midHi++;
  else top = `${literal(h[0])} (${sameLength("0".repeat(n - 1), restHi)})`;
  if (midLo <= midHi) parts.push(`${digitClass(midLo, midHi)} ${digits(n - 1, n - 1)}`);
  if (top !== undefined) parts.push(top);
  return prefix + (prefix === "" ? alternatives(parts) : `(${alternatives(parts)})`);
}

function alternatives(parts: string[]): string {
  return parts.length === 1 ? parts[0] : parts.map((p) => `(${p})`).join(" | ");
}

function literal(digitString: string): string {
  return `"${digitString}"`;
}

function digitClass(from: number, to: number): string {
  return from === to ? literal(String(from)) : `[${from}-${to}]`;
}

/** Between min and max digits (min ≤ max). */
function digits(min: number, max: number): string {
  return min === max ? (min === 1 ? "[0-9]" : `[0-9]{${min}}`) : `[0-9]{${min},${max}}`;
}

type Json = Record<string, unknown>;

const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] as const;

/** A schema with its bounded integers taken out, as {@link placeIntegerRanges} gives it. */
export interface PlacedRanges {
  /** The schema to hand the engine (a copy; the original is untouched). */
  schema: unknown;
  /** Prefix of the placeholders: the constant of range n is `${marker}${n}`, which the schema's text does not hold anywhere else. */
  marker: string;
  /** Inclusive bounds of each placeholder's range, by n (null: unbounded). */
  ranges: Array<[bigint | null, bigint | null]>;
}

/**
 * Replaces every integer subschema with numeric bounds by `{"const": "<marker><n>"}` (kept
 * `$defs`/`definitions` beside it, so references into them still resolve). Bounded integers that
 * also have `enum`/`const` become the enum of the listed integers inside the bounds instead, since
 * the engine would enforce the list alone. Walks every subschema position and every `$ref` target;
 * expects a schema checkJsonSchema accepted.
 */
export function placeIntegerRanges(schema: unknown): PlacedRanges {
  const text = JSON.stringify(schema);
  let marker = "kilnint";
  for (let k = 0; text.includes(marker); k++) marker = `kilnint${k}x`;
  const placed: PlacedRanges = { schema: structuredClone(schema), marker, ranges: [] };
  const top: Json = { root: placed.schema };
  const seen = new WeakSet<object>();

  const visit = (holder: Json | unknown[], key: string | number): void => {
    const node = (holder as Json)[key as string];
    if (!isObject(node) || seen.has(node)) return;
    seen.add(node);
    const replacement = boundedInteger(node, placed);
    if (replacement !== undefined) {
      (holder as Json)[key as string] = replacement;
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

/** The engine's EBNF of a placed schema with each placeholder literal replaced by its exact range rule. */
export function fillIntegerRanges(ebnf: string, placed: PlacedRanges): string {
  if (placed.ranges.length === 0) return ebnf;
  const rule = (n: string) => `${placed.marker}_${n}`;
  // The placeholder as the engine prints it inside a literal: \"kilnint7\" (quotes escaped).
  const quoted = String.raw`\\"` + placed.marker + String.raw`(\d+)\\"`;
  const filled = ebnf
    // The placeholder as a whole literal, as the engine prints a constant string on its own...
    .replace(new RegExp(`"${quoted}"`, "g"), (_, n: string) => rule(n))
    // ...or inside a longer literal, which is split around it.
    .replace(new RegExp(quoted, "g"), (_, n: string) => `" ${rule(n)} "`);
  if (new RegExp(placed.marker + "\\d").test(filled)) throw new Error("a bounded-integer placeholder was left in the schema's grammar");
  const rules = placed.ranges.map(([lo, hi], n) => `${rule(String(n))} ::= ${integerRangeEbnf(lo, hi)}`);
  return filled.replace(/\n?$/, "\n") + rules.join("\n") + "\n";
}

/** The replacement of a bounded integer subschema, or undefined when `node` is not one. */
function boundedInteger(node: Json, placed: PlacedRanges): Json | undefined {
  const has = (k: string) => Object.prototype.hasOwnProperty.call(node, k);
  const types = typeof node.type === "string" ? [node.type] : Array.isArray(node.type) ? node.type : [];
  if (!BOUNDS.some(has) || types.length === 0 || types.some((t) => t !== "integer")) return undefined;
  let lo: bigint | null = null;
  let hi: bigint | null = null;
  const raise = (v: bigint) => (lo = lo === null || v > lo ? v : lo);
  const lower = (v: bigint) => (hi = hi === null || v < hi ? v : hi);
  // Fractional bounds are refused by the gate; rounding inward keeps them exact anyway.
  if (typeof node.minimum === "number") raise(BigInt(Math.ceil(node.minimum)));
  if (typeof node.exclusiveMinimum === "number") raise(BigInt(Math.floor(node.exclusiveMinimum)) + 1n);
  if (typeof node.maximum === "number") lower(BigInt(Math.floor(node.maximum)));
  if (typeof node.exclusiveMaximum === "number") lower(BigInt(Math.ceil(node.exclusiveMaximum)) - 1n);
  const out: Json = {};
  for (const k of ["$defs", "definitions"]) if (has(k)) out[k] = node[k];
  if (has("enum") || has("const")) {
    const listed = has("const") ? [node.const] : Array.isArray(node.enum) ? node.enum : [];
    out.enum = listed.filter((v) => integerWithin(v, lo, hi) && (!has("enum") || (Array.isArray(node.enum) && node.enum.includes(v))));
    return out;
  }
  out.const = placed.marker + placed.ranges.length;
  placed.ranges.push([lo, hi]);
  return out;
}

/** Whether a JSON value is an integer within [lo, hi] (null: unbounded). */
function integerWithin(v: unknown, lo: bigint | null, hi: bigint | null): boolean {
  if (typeof v !== "number" || !Number.isInteger(v)) return false;
  const n = BigInt(v);
  return (lo === null || n >= lo) && (hi === null || n <= hi);
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
