/**
 * Exact EBNF for ranges of JSON integers. web-xgrammar 0.1.27's JSON-schema compiler builds wrong
 * rules for some ranges (`[0,120]` comes out as `"1" [0-2] [0-9]` among others, letting 121..129
 * through, and splitting the range into anyOf parts does not reliably help), so kiln never lets it
 * see a bounded integer: each one takes a rule kiln writes (placed-rules.ts).
 */
import type { PlacedRule } from "./placed-rules.js";

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

/**
 * What takes a bounded integer subschema's place (placed-rules.ts): its exact range rule, or, beside
 * `enum`/`const`, the enum of the listed integers inside the bounds (the engine would enforce the
 * list alone). Undefined when `node` is not a bounded integer.
 */
export function boundedIntegerRule(node: Json): PlacedRule | undefined {
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
  if (has("enum") || has("const")) {
    const listed = has("const") ? [node.const] : Array.isArray(node.enum) ? node.enum : [];
    return { schema: { enum: listed.filter((v) => integerWithin(v, lo, hi) && (!has("enum") || (Array.isArray(node.enum) && node.enum.includes(v)))) } };
  }
  return { rule: integerRangeEbnf(lo, hi) };
}

/** Whether a JSON value is an integer within [lo, hi] (null: unbounded). */
function integerWithin(v: unknown, lo: bigint | null, hi: bigint | null): boolean {
  if (typeof v !== "number" || !Number.isInteger(v)) return false;
  const n = BigInt(v);
  return (lo === null || n >= lo) && (hi === null || n <= hi);
}
