/**
 * EBNF kiln writes for string formats whose rules in the engine let invalid values through:
 * - `date`, `time`, `date-time` (RFC 3339's full-date, full-time, date-time): the engine's allow a
 *   31st of every month, a 29th of February in any year, minute 60. kiln's: every day a month has
 *   (29 February in leap years only), hours 00-23, minutes and seconds 00-59 (no leap second), at
 *   most nine fraction digits, and an offset (`Z` or ±hh:mm);
 * - `ipv4`: the engine's allow leading zeros (`097.1.2.3`), which RFC 3986's dec-octet does not;
 * - `email`: the engine's quoted local part writes a backslash and any character, which in JSON
 *   text is an invalid escape. kiln's: a dot-atom local part (RFC 5322's atext), `@`, and a domain
 *   of at least two labels of letters, digits and inner hyphens;
 * - `json-pointer`: the engine's lets a raw quote, backslash or control character into the string,
 *   which is not JSON. kiln's: any character but those between the `/`s, `~` only as `~0` or `~1`.
 */
import type { PlacedRule } from "./placed-rules.js";

type Json = Record<string, unknown>;

const DAY_31 = `"0" [1-9] | [12] [0-9] | "3" [01]`;
const DAY_30 = `"0" [1-9] | [12] [0-9] | "30"`;
const DAY_28 = `"0" [1-9] | "1" [0-9] | "2" [0-8]`;
/** Years divisible by 4, less those divisible by 100 but not by 400. */
const LEAP_YEAR = `[0-9] [0-9] ("0" [48] | [2468] [048] | [13579] [26]) | ([02468] [048] | [13579] [26]) "00"`;
const MONTH_DAY = `("0" [13578] | "1" [02]) "-" (${DAY_31}) | ("0" [469] | "11") "-" (${DAY_30}) | "02-" (${DAY_28})`;
const HOUR = `[01] [0-9] | "2" [0-3]`;

export const DATE_EBNF = `[0-9]{4} "-" (${MONTH_DAY}) | (${LEAP_YEAR}) "-02-29"`;
export const TIME_EBNF = `(${HOUR}) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+\\-] (${HOUR}) ":" [0-5] [0-9])`;
export const DATE_TIME_EBNF = `(${DATE_EBNF}) "T" ${TIME_EBNF}`;

const OCTET = `"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]`;
export const IPV4_EBNF = `(${OCTET}) "." (${OCTET}) "." (${OCTET}) "." (${OCTET})`;

const ATEXT = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]";
const LABEL = String.raw`[a-zA-Z0-9] ([a-zA-Z0-9\-]* [a-zA-Z0-9])?`;
export const EMAIL_EBNF = `${ATEXT}+ ("." ${ATEXT}+)* "@" (${LABEL}) ("." (${LABEL}))+`;

export const JSON_POINTER_EBNF = String.raw`("/" ([^\0-\x1f\"\\~/] | "~" [01])*)*`;

const FORMATS: Record<string, string> = {
  date: DATE_EBNF,
  time: TIME_EBNF,
  "date-time": DATE_TIME_EBNF,
  ipv4: IPV4_EBNF,
  email: EMAIL_EBNF,
  "json-pointer": JSON_POINTER_EBNF,
};

/**
 * The rule of a string subschema with one of these formats (placed-rules.ts): the quoted value.
 * Undefined for anything else, and for a format beside other types or a listed value, which the
 * engine's rules hold.
 */
export function stringFormatRule(node: Json): PlacedRule | undefined {
  const body = typeof node.format === "string" && Object.prototype.hasOwnProperty.call(FORMATS, node.format) ? FORMATS[node.format] : undefined;
  if (body === undefined) return undefined;
  const types = typeof node.type === "string" ? [node.type] : Array.isArray(node.type) ? node.type : [];
  if (types.length !== 1 || types[0] !== "string" || "enum" in node || "const" in node) return undefined;
  return { rule: `"\\"" (${body}) "\\""` };
}
