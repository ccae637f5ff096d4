// Claim: kiln's rules for string formats, run through the real engine, accept exactly the values
// kiln writes: for date, time and date-time, RFC 3339's with every day each month has (29 February
// in leap years only, judged by the calendar of JavaScript's Date), hours 00-23, minutes and
// seconds 00-59, up to nine fraction digits and an offset; IPv4 addresses without leading zeros;
// dot-atom emails; JSON pointers without a raw quote, backslash or control character. They take a
// string's place wherever it sits in a schema.
import { describe, expect, it } from "vitest";
import {
  DATE_EBNF,
  DATE_TIME_EBNF,
  EMAIL_EBNF,
  IPV4_EBNF,
  JSON_POINTER_EBNF,
  stringFormatRule,
  TIME_EBNF,
} from "../../../../src/runtime/constrain/string-formats.js";
import { fillRules, placeRules } from "../../../../src/runtime/constrain/placed-rules.js";
import { acceptor, schemaEbnf } from "../../../support/grammar-acceptor.js";

const pad = (n: number, width = 2) => String(n).padStart(width, "0");

/** Whether y-m-d is a day of the proleptic Gregorian calendar (Date's own). */
function isDay(y: number, m: number, d: number): boolean {
  const date = new Date(Date.UTC(2000, m - 1, d));
  date.setUTCFullYear(y);
  return date.getUTCFullYear() === y && date.getUTCMonth() === m - 1 && date.getUTCDate() === d;
}

describe("date", () => {
  it("accepts exactly the days of each month, 29 February in leap years only", async () => {
    const grammar = await acceptor(`root ::= ${DATE_EBNF}\n`);
    const wrong: string[] = [];
    for (const y of [0, 4, 100, 400, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9999]) {
      for (let m = 0; m <= 13; m++) {
        for (let d = 0; d <= 32; d++) {
          const text = `${pad(y, 4)}-${pad(m)}-${pad(d)}`;
          const expected = m >= 1 && m <= 12 && d >= 1 && isDay(y, m, d);
          if (grammar.accepts(text) !== expected) wrong.push(`${text}: expected ${expected}`);
        }
      }
    }
    for (const text of ["2024-1-01", "24-01-01", "2024-01-01T", "2024/01/01", "+2024-01-01", "2024-001-01"]) if (grammar.accepts(text)) wrong.push(text);
    grammar.dispose();
    expect(wrong.slice(0, 20)).toEqual([]);
  });
});

describe("time and date-time", () => {
  it("accept hours 00-23, minutes and seconds 00-59, a fraction of up to nine digits and an offset", async () => {
    const time = await acceptor(`root ::= ${TIME_EBNF}\n`);
    const wrong: string[] = [];
    for (let h = 0; h <= 24; h++) {
      for (const min of [0, 30, 59, 60]) {
        for (const s of [0, 59, 60]) {
          const text = `${pad(h)}:${pad(min)}:${pad(s)}Z`;
          if (time.accepts(text) !== (h < 24 && min < 60 && s < 60)) wrong.push(text);
        }
      }
    }
    const cases: Array<[string, boolean]> = [
      ["12:30:45.5Z", true],
      ["12:30:45.123456789+05:30", true],
      ["12:30:45.1234567890Z", false],
      ["12:30:45.Z", false],
      ["12:30:45-23:59", true],
      ["12:30:45-24:00", false],
      ["12:30:45+05:60", false],
      ["12:30:45", false],
      ["12:30:45z", false],
      ["12:30Z", false],
    ];
    for (const [text, expected] of cases) if (time.accepts(text) !== expected) wrong.push(`${text}: expected ${expected}`);
    time.dispose();
    const dateTime = await acceptor(`root ::= ${DATE_TIME_EBNF}\n`);
    for (const [text, expected] of [
      ["2024-02-29T23:59:59Z", true],
      ["2023-02-29T00:00:00Z", false],
      ["2023-09-31T00:00:00Z", false],
      ["2023-09-30T22:60:19+01:00", false],
      ["2023-09-30 22:00:19Z", false],
    ] as const)
      if (dateTime.accepts(text) !== expected) wrong.push(`${text}: expected ${expected}`);
    dateTime.dispose();
    expect(wrong).toEqual([]);
  });
});

describe("ipv4, email and json-pointer", () => {
  const judged: Array<[string, string, Array<[string, boolean]>]> = [
    [
      "ipv4",
      IPV4_EBNF,
      [
        ["0.0.0.0", true],
        ["255.255.255.255", true],
        ["192.168.1.10", true],
        ["256.1.1.1", false],
        ["097.1.1.1", false],
        ["1.2.3.04", false],
        ["1.2.3", false],
        ["1.2.3.4.5", false],
      ],
    ],
    [
      "email",
      EMAIL_EBNF,
      [
        ["ada@example.com", true],
        ["o'brien+tag@mail.example.co.uk", true],
        ["a.b{c}@x-y.z", true],
        ["a..b@x.y", false],
        [".a@x.y", false],
        ["a@localhost", false],
        ["a@-x.y", false],
        ["a@x-.y", false],
        ['"quoted"@x.y', false],
        ["a\\b@x.y", false],
      ],
    ],
    [
      "json-pointer",
      JSON_POINTER_EBNF,
      [
        ["", true],
        ["/", true],
        ["/a/b~0c/~1/é ☃", true],
        ["a/b", false],
        ["/a~2", false],
        ["/a~", false],
        ['/a"b', false],
        ["/a\\b", false],
        ["/a\nb", false],
      ],
    ],
  ];
  for (const [name, ebnf, cases] of judged) {
    it(`${name}: accepts what it should and refuses the rest`, async () => {
      const grammar = await acceptor(`root ::= ${ebnf}\n`);
      const wrong = cases
        .filter(([text, expected]) => grammar.accepts(text) !== expected)
        .map(([text, expected]) => `${JSON.stringify(text)}: expected ${expected}`);
      grammar.dispose();
      expect(wrong).toEqual([]);
    });
  }
});

describe("stringFormatRule in a schema", () => {
  it("takes the place of each such string, leaving a format beside null or a listed value to the engine", async () => {
    const schema = {
      type: "object",
      properties: {
        born: { type: "string", format: "date" },
        seen: { type: "array", items: { $ref: "#/$defs/moment" }, maxItems: 2 },
        maybe: { type: ["string", "null"], format: "date" },
        fixed: { type: "string", format: "date", enum: ["2023-02-29"] },
      },
      required: ["born", "seen"],
      additionalProperties: false,
      $defs: { moment: { type: "string", format: "date-time" } },
    };
    const placed = placeRules(schema, stringFormatRule);
    expect(placed.rules).toHaveLength(2);
    const grammar = await acceptor(fillRules(await schemaEbnf(placed.schema), placed));
    const ok = (v: unknown) => grammar.accepts(JSON.stringify(v));
    expect(ok({ born: "2024-02-29", seen: ["2024-02-29T12:00:00Z"] })).toBe(true);
    expect(ok({ born: "2023-02-29", seen: [] })).toBe(false);
    expect(ok({ born: "2023-01-31", seen: ["2023-04-31T12:00:00Z"] })).toBe(false);
    expect(ok({ born: "2023-01-31", seen: [], maybe: null, fixed: "2023-02-29" })).toBe(true);
    grammar.dispose();
  });
});
