// Claim: with SmolLM2's real vocabulary, the constraint engine's masks let a valid JSON text through
// token by token (longest allowed token each step, as a greedy model would), refuse tokens that break
// the grammar, allow only stop tokens once the JSON is complete, and survive engine aborts. Regexes,
// choices and structural tags: random walks over the allowed tokens (seeded) only ever produce
// matching outputs; a structural tag's free text gets the null (free) mask until its trigger, then
// only valid calls, with schemas held to the same JSON as json_schema (whitespace bounded after separators). Bounded integers are
// exact (the engine's own range rules let 121..129 through a maximum of 120), in json_schema
// constraints and in structural tags alike.
import { Ajv2020 } from "ajv/dist/2020.js";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { readTokenizerSpec, type TokenizerSpec } from "../../../../src/runtime/artifact/index.js";
import { applyTokenMask, ConstraintEngine, ConstraintError, type ConstraintSpec, type TokenMatcher } from "../../../../src/runtime/constrain/index.js";
import { Xoshiro128ss } from "../../../../src/runtime/sampling/prng.js";
import { thinkingFirst } from "../../../../src/scheduler/reasoning/index.js";
import { hermes } from "../../../../src/scheduler/tools/hermes.js";
import { CallParser, toolConstraint, type ToolOutputPiece } from "../../../../src/scheduler/tools/index.js";
import { llama3 } from "../../../../src/scheduler/tools/llama3.js";
import { mistral } from "../../../../src/scheduler/tools/mistral.js";
import { smollm2 } from "../../../../src/scheduler/tools/smollm2.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { compiledArtifact } from "../../../support/model.js";
import { structuredSchemas } from "../../../support/schemas.js";

// Lets one test hand the engine a schema the JS check would refuse, to cause a real engine abort.
const bypass = vi.hoisted(() => ({ on: false }));
vi.mock("../../../../src/runtime/constrain/check-schema.js", async (importOriginal) => {
  const real = await importOriginal<typeof import("../../../../src/runtime/constrain/check-schema.js")>();
  return { ...real, checkJsonSchema: (s: unknown) => (bypass.on ? undefined : real.checkJsonSchema(s)) };
});

const SCHEMA = {
  $defs: {
    Address: {
      type: "object",
      properties: { street: { type: "string" }, zip: { type: "string", pattern: "^[0-9]{5}$" } },
      required: ["street", "zip"],
      additionalProperties: false,
    },
  },
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 40 },
    age: { type: "integer", minimum: 0, maximum: 150 },
    role: { enum: ["admin", "user", "guest"] },
    score: { type: "number" },
    active: { type: "boolean" },
    tags: { type: "array", items: { type: "string" }, maxItems: 5 },
    address: { $ref: "#/$defs/Address" },
    note: { anyOf: [{ type: "string" }, { type: "null" }] },
  },
  required: ["name", "age", "role", "score", "active", "tags", "address", "note"],
  additionalProperties: false,
};
const INSTANCE = {
  name: "Ada Lovelace",
  age: 36,
  role: "admin",
  score: 97.25,
  active: true,
  tags: ["math", "poetry", "naïve ☃"],
  address: { street: "12 St James's Square", zip: "01234" },
  note: null,
};

let spec: TokenizerSpec;
let stopIds: number[];
let width: number;
let tokenizer: Tokenizer;
let byFirst: number[][];
let engine: ConstraintEngine;
let createMs: number;
/** The mask a null (free-text) answer stands for. */
let freeMask: Int32Array;

beforeAll(async () => {
  const { dir, manifest } = await compiledArtifact();
  spec = readTokenizerSpec(dir);
  stopIds = manifest.stopTokenIds;
  width = manifest.shape.vocab;
  tokenizer = Tokenizer.fromSpec(spec);
  byFirst = Array.from({ length: 256 }, () => []);
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    const b = tokenizer.tokenBytes(id);
    if (b.length > 0) byFirst[b[0]].push(id);
  }
  const t = performance.now();
  engine = await ConstraintEngine.create(spec, width, stopIds);
  createMs = performance.now() - t;
  freeMask = new Int32Array(Math.ceil(width / 32)).fill(-1);
  for (const id of engine.freeTextBans) freeMask[id >>> 5] &= ~(1 << (id & 31));
  for (let id = width; id < freeMask.length * 32; id++) freeMask[id >>> 5] &= ~(1 << (id & 31));
});

async function maskOf(m: TokenMatcher): Promise<Int32Array> {
  return (await m.nextMask()) ?? freeMask;
}

const allowed = (mask: Int32Array, id: number) => ((mask[id >>> 5] >>> (id & 31)) & 1) === 1;
function allowedIds(mask: Int32Array): number[] {
  const out: number[] = [];
  for (let id = 0; id < width; id++) if (allowed(mask, id)) out.push(id);
  return out;
}

/** Longest allowed token whose bytes start target[pos:], or -1. */
function pick(mask: Int32Array, target: Uint8Array, pos: number): number {
  let best = -1;
  let bestLen = 0;
  for (const id of byFirst[target[pos]]) {
    const b = tokenizer.tokenBytes(id);
    if (b.length <= bestLen || pos + b.length > target.length || !allowed(mask, id)) continue;
    let same = true;
    for (let i = 0; i < b.length && same; i++) same = b[i] === target[pos + i];
    if (same) [best, bestLen] = [id, b.length];
  }
  return best;
}

/** Drives the matcher along `text`; returns the per-token mask times. */
async function walk(m: TokenMatcher, text: string): Promise<{ maskMs: number[]; tokens: number }> {
  const target = new TextEncoder().encode(text);
  const maskMs: number[] = [];
  const out: number[] = [];
  let pos = 0;
  while (pos < target.length) {
    const t = performance.now();
    const mask = await maskOf(m);
    maskMs.push(performance.now() - t);
    expect(mask.length).toBe(Math.ceil(width / 32));
    const id = pick(mask, target, pos);
    expect(id, `no allowed token at byte ${pos}: ${new TextDecoder().decode(target.subarray(pos, pos + 20))}`).toBeGreaterThanOrEqual(0);
    expect(allowed(mask, id)).toBe(true);
    expect(m.accept(id)).toBe(true);
    out.push(id);
    pos += tokenizer.tokenBytes(id).length;
  }
  expect(tokenizer.decode(out)).toBe(text);
  // Complete: only stop tokens may follow.
  const end = allowedIds(await maskOf(m));
  expect(end.length).toBeGreaterThan(0);
  for (const id of end) expect(stopIds).toContain(id);
  expect(m.terminated).toBe(false);
  expect(m.accept(end[0])).toBe(true);
  expect(m.terminated).toBe(true);
  return { maskMs, tokens: out.length };
}

function summary(xs: number[]) {
  const s = [...xs].sort((a, b) => a - b);
  const r = (x: number) => +x.toFixed(3);
  return {
    n: s.length,
    mean: r(s.reduce((a, b) => a + b, 0) / s.length),
    p50: r(s[s.length >> 1]),
    p90: r(s[Math.floor(s.length * 0.9)]),
    max: r(s[s.length - 1]),
  };
}

describe("ConstraintEngine on SmolLM2's vocabulary", () => {
  it("walks a schema-valid text token by token; only stop tokens at the end", async () => {
    const schema = JSON.stringify(SCHEMA);
    let t = performance.now();
    const m = engine.matcher({ type: "json_schema", schema });
    const compileMs = performance.now() - t;
    t = performance.now();
    engine.matcher({ type: "json_schema", schema: JSON.stringify(SCHEMA, null, 2) }).dispose(); // same content: cached
    const cachedMs = performance.now() - t;
    const text = JSON.stringify(INSTANCE);
    const { maskMs, tokens } = await walk(m, text);
    m.dispose();
    const validate = new Ajv2020().compile(SCHEMA);
    expect(validate(JSON.parse(text))).toBe(true);
    console.log(
      JSON.stringify({
        engineCreateMs: Math.round(createMs),
        schemaCompileMs: +compileMs.toFixed(1),
        cachedMatcherMs: +cachedMs.toFixed(2),
        tokens,
        maskMs: summary(maskMs),
      }),
    );
  });

  it("strings bounded in length, a pattern's '.' and negated classes: random walks are JSON, with no raw control character, quote or backslash in a string", async () => {
    const schema = {
      type: "object",
      properties: {
        short: { type: "string", maxLength: 6 },
        long: { type: "string", minLength: 2, maxLength: 10 },
        dotted: { type: "string", pattern: "^a.{1,4}z$" },
        negated: { type: "string", pattern: "^[^,;]{1,6}$" },
      },
      required: ["short", "long", "dotted", "negated"],
      additionalProperties: false,
    };
    const validate = new Ajv2020().compile(schema);
    const spec: ConstraintSpec = { type: "json_schema", schema: JSON.stringify(schema) };
    const raw = /[\u0000-\u001f]/;
    for (let seed = 1; seed <= 12; seed++) {
      const m = engine.matcher(spec);
      const text = await randomWalk(m, seed, 0.9, 400);
      m.dispose();
      let value: Record<string, string>;
      try {
        value = JSON.parse(text) as Record<string, string>;
      } catch (e) {
        throw new Error(`not JSON (${String(e)}): ${JSON.stringify(text)}`);
      }
      expect(validate(value), JSON.stringify(text)).toBe(true);
      for (const v of Object.values(value)) expect(raw.test(v) || v.includes('"') || v.includes("\\"), JSON.stringify(text)).toBe(false);
    }
    // Neither a control character nor an escape can be written into any of them.
    for (const [key, begin] of [
      ["short", ""],
      ["long", "ab"],
      ["dotted", "a"],
      ["negated", "x"],
    ]) {
      const m = engine.matcher(spec);
      const prefix = {
        short: '{"short": "',
        long: '{"short": "", "long": "',
        dotted: '{"short": "", "long": "ab", "dotted": "',
        negated: '{"short": "", "long": "ab", "dotted": "abz", "negated": "',
      }[key]!;
      await feed(m, prefix + begin);
      const mask = await maskOf(m);
      const controls = allowedIds(mask).filter((id) => tokenizer.tokenBytes(id).some((b) => b < 0x20 || b === 0x5c));
      expect(
        controls.map((id) => tokenizer.decode([id])),
        key,
      ).toEqual([]);
      m.dispose();
    }
  });

  it("a long string bound (maxLength 2,000, two fields sharing it) holds exactly: after 2,000 characters only the closing quote", async () => {
    const long = { type: "string", minLength: 1, maxLength: 2000 };
    const schema = { type: "object", properties: { a: long, b: long }, required: ["a", "b"], additionalProperties: false };
    const t = performance.now();
    const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(schema) });
    const compileMs = performance.now() - t;
    const { maskMs } = await walk(m, `{"a": "${"ab cd ".repeat(333)}ab", "b": "x"}`);
    m.dispose();
    const full = engine.matcher({ type: "json_schema", schema: JSON.stringify(schema) });
    await feed(full, `{"a": "${"z".repeat(2000)}`);
    const next = allowedIds(await maskOf(full));
    expect(next.length).toBeGreaterThan(0);
    for (const id of next) expect(tokenizer.decode([id]).startsWith('"'), tokenizer.decode([id])).toBe(true);
    full.dispose();
    console.log(JSON.stringify({ longStringCompileMs: Math.round(compileMs), maskMs: summary(maskMs) }));
  });

  it("a long array bound (maxItems 300) holds exactly: after 300 items only the closing bracket", async () => {
    const schema = { type: "array", items: { type: "integer", minimum: 0, maximum: 9 }, minItems: 1, maxItems: 300 };
    const t = performance.now();
    const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(schema) });
    const compileMs = performance.now() - t;
    await feed(m, "[" + Array.from({ length: 300 }, (_, i) => i % 10).join(","));
    const next = allowedIds(await maskOf(m));
    expect(
      next.map((id) => tokenizer.decode([id])).every((text) => text.startsWith("]")),
      next.map((id) => tokenizer.decode([id])).join(" "),
    ).toBe(true);
    m.dispose();
    console.log(JSON.stringify({ longArrayCompileMs: Math.round(compileMs) }));
  });

  it("json_object: walks a nested object; refuses a top-level array and whitespace", async () => {
    const text = JSON.stringify({ a: [1, -2.5e3, { b: null }], 'c"d': "x\\ny", e: {}, f: [], g: false });
    const m = engine.matcher({ type: "json_object" });
    const { maskMs, tokens } = await walk(m, text);
    m.dispose();
    console.log(JSON.stringify({ jsonObjectTokens: tokens, maskMs: summary(maskMs) }));

    const fresh = engine.matcher({ type: "json_object" });
    const first = await maskOf(fresh);
    const bracket = tokenizer.encode("[")[0];
    expect(allowed(first, bracket)).toBe(false);
    expect(fresh.accept(bracket)).toBe(false);
    expect(fresh.accept(tokenizer.encode("{")[0])).toBe(true);
    // JSON's optional whitespace, in llama.cpp's bounded amounts: one space, not a second.
    const space = tokenizer.encode(" ")[0];
    expect(allowed(await maskOf(fresh), space)).toBe(true);
    expect(fresh.accept(space)).toBe(true);
    expect(allowed(await maskOf(fresh), space)).toBe(false);
    expect(fresh.accept(space)).toBe(false);
    fresh.dispose();
  });

  it("json_object and json_schema: a space or a newline and indent after separators, written as a model writes it", async () => {
    const loose = '{"a": [1, -2.5e3, {"b": null}],\n  "c": "x: y,z", "e": {}}';
    const m = engine.matcher({ type: "json_object" });
    await walk(m, loose);
    m.dispose();
    const spaced = JSON.stringify(INSTANCE).replaceAll('","', '", "').replaceAll('":', '": ').replace('"age": 36,', '"age": 36,\n    ');
    const s = engine.matcher({ type: "json_schema", schema: JSON.stringify(SCHEMA) });
    await walk(s, spaced);
    s.dispose();
    // A pattern's own ":" or "," takes no whitespace: only the separators do.
    const pattern = engine.matcher({
      type: "json_schema",
      schema: JSON.stringify({ type: "object", properties: { t: { type: "string", pattern: "^a:b,c$" } }, required: ["t"], additionalProperties: false }),
    });
    await feed(pattern, '{"t": "a:');
    expect(pattern.accept(tokenizer.encode(" ")[0])).toBe(false);
    pattern.dispose();
  });

  it("numbers: at most 16 integer digits and 16 fraction digits, as llama.cpp allows", async () => {
    const schema = { type: "object", properties: { n: { type: "integer" }, x: { type: "number" } }, required: ["n", "x"], additionalProperties: false };
    for (const spec of [{ type: "json_object" }, { type: "json_schema", schema: JSON.stringify(schema) }] as ConstraintSpec[]) {
      const m = engine.matcher(spec);
      await feed(m, '{"n":' + "1".repeat(16));
      expect(m.accept(tokenizer.encode("1")[0]), spec.type).toBe(false);
      await feed(m, ',"x":-' + "9".repeat(16) + "." + "5".repeat(16));
      expect(m.accept(tokenizer.encode("5")[0]), spec.type).toBe(false);
      await feed(m, "e+12}");
      expect(m.accept(stopIds[0])).toBe(true);
      m.dispose();
    }
  });

  it("refuses a token that breaks the schema, and control tokens inside strings", async () => {
    const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(SCHEMA) });
    for (const id of tokenizer.encode('{"name":"Ada","age":')) {
      await m.nextMask();
      expect(m.accept(id)).toBe(true);
    }
    const mask = await maskOf(m);
    const quote = tokenizer.encode('"')[0];
    const minus = tokenizer.encode("-")[0];
    expect(allowed(mask, quote)).toBe(false);
    expect(m.accept(quote)).toBe(false); // a string where an integer must be
    expect(m.accept(minus)).toBe(false); // minimum 0
    for (const id of stopIds) expect(m.accept(id)).toBe(false); // incomplete
    expect(m.accept(tokenizer.encode("7")[0])).toBe(true);
    m.dispose();

    const s = engine.matcher({
      type: "json_schema",
      schema: JSON.stringify({ type: "object", properties: { s: { type: "string" } }, required: ["s"], additionalProperties: false }),
    });
    for (const id of tokenizer.encode('{"s":"')) expect(s.accept(id)).toBe(true);
    const inString = await maskOf(s);
    for (let id = 0; id < tokenizer.vocabSize; id++) if (tokenizer.isControl(id)) expect(allowed(inString, id)).toBe(false);
    s.dispose();
  });

  it("refuses schemas the JS check refuses, as ConstraintError", () => {
    expect(() => engine.matcher({ type: "json_schema", schema: "{not json" })).toThrow(ConstraintError);
    expect(() => engine.matcher({ type: "json_schema", schema: '{"type":"object","properties":{"v":{"$ref":"#/$defs/X"}}}' })).toThrow(/does not resolve/);
  });

  it("turns an engine abort into a ConstraintError and carries on with a fresh instance", async () => {
    const running = engine.matcher({ type: "json_object" });
    expect(running.accept(tokenizer.encode("{")[0])).toBe(true);
    bypass.on = true;
    try {
      // minItems beyond what `items: false` allows: the engine aborts on it.
      const bad = JSON.stringify({ type: "array", minItems: 2, items: false });
      expect(() => engine.matcher({ type: "json_schema", schema: bad })).toThrow(/constrained-decoding engine refused this schema/);
    } finally {
      bypass.on = false;
    }
    await engine.settled();
    const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(SCHEMA) });
    await walk(m, JSON.stringify(INSTANCE));
    m.dispose();
    // A matcher from before the abort goes on.
    await running.nextMask();
    expect(running.accept(tokenizer.encode("}")[0])).toBe(true);
    running.dispose();
  });
});

/** Drives the matcher along `text` (longest allowed token each step); returns whether each step's mask was null (free text). */
async function feed(m: TokenMatcher, text: string): Promise<boolean[]> {
  const target = new TextEncoder().encode(text);
  const free: boolean[] = [];
  let pos = 0;
  while (pos < target.length) {
    const raw = await m.nextMask();
    free.push(raw === null);
    const id = pick(raw ?? freeMask, target, pos);
    expect(id, `no allowed token at byte ${pos} of ${JSON.stringify(text)}`).toBeGreaterThanOrEqual(0);
    expect(m.accept(id)).toBe(true);
    pos += tokenizer.tokenBytes(id).length;
  }
  return free;
}

/**
 * Random allowed tokens (seeded) until a stop token is taken: one with probability `stopChance`
 * whenever one is allowed, or when nothing else is. Returns the decoded output.
 */
async function randomWalk(m: TokenMatcher, seed: number, stopChance = 0.3, maxTokens = 80): Promise<string> {
  const rng = Xoshiro128ss.fromSeed(seed);
  const out: number[] = [];
  for (let step = 0; step < maxTokens; step++) {
    const ids = allowedIds(await maskOf(m));
    expect(ids.length, "an empty mask").toBeGreaterThan(0);
    const stops = ids.filter((id) => stopIds.includes(id));
    const others = ids.filter((id) => !stopIds.includes(id));
    if (stops.length > 0 && (others.length === 0 || rng.nextFloat() < stopChance)) {
      expect(m.accept(stops[0])).toBe(true);
      expect(m.terminated).toBe(true);
      return tokenizer.decode(out);
    }
    const id = others[Math.floor(rng.nextFloat() * others.length)];
    expect(m.accept(id)).toBe(true);
    out.push(id);
  }
  throw new Error(`no stop after ${maxTokens} tokens: ${JSON.stringify(tokenizer.decode(out))}`);
}

const CITY = {
  type: "object",
  properties: { city: { type: "string", minLength: 1, maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 14 } },
  required: ["city", "days"],
  additionalProperties: false,
};
const CALL_BEGIN = '<tool_call>\n{"name": "f", "arguments": ';
const CALL_END = "}\n</tool_call>";
const callTag = { type: "tag", begin: CALL_BEGIN, content: { type: "json_schema", json_schema: CITY }, end: CALL_END };
const triggered: ConstraintSpec = { type: "structural_tag", format: JSON.stringify({ type: "triggered_tags", triggers: ["<tool_call>"], tags: [callTag] }) };
const forced: ConstraintSpec = {
  type: "structural_tag",
  format: JSON.stringify({ type: "tags_with_separator", tags: [callTag], separator: "\n", at_least_one: true }),
};

/** The calls in a text, checked against the CITY schema. */
function calls(text: string): unknown[] {
  const validate = new Ajv2020().compile(CITY);
  const found: unknown[] = [];
  for (const part of text.split(CALL_BEGIN).slice(1)) {
    const end = part.indexOf(CALL_END);
    expect(end, `an unclosed call in ${JSON.stringify(text)}`).toBeGreaterThanOrEqual(0);
    const args = JSON.parse(part.slice(0, end));
    expect(validate(args), JSON.stringify(args)).toBe(true);
    found.push(args);
  }
  return found;
}

describe("regex, choice and structural tags on SmolLM2's vocabulary", () => {
  // [pattern, what a JS regex holds the output to (the engine's \s is ASCII white space, its . any character but \n)]
  const patterns: Array<[string, RegExp]> = [
    ["\\d{3}-\\d{4}", /^\d{3}-\d{4}$/],
    ["(cat|dog|bird)s?", /^(cat|dog|bird)s?$/],
    ["[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6}){0,2}", /^[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6}){0,2}$/],
    ["-?(0|[1-9][0-9]{0,4})(\\.[0-9]{1,2})?", /^-?(0|[1-9][0-9]{0,4})(\.[0-9]{1,2})?$/],
    ['"[^"\\n]{0,8}"', /^"[^"\n]{0,8}"$/u],
    ["(?<user>[a-z]{1,5})@(?<host>[a-z]{1,5})\\.(com|org)", /^[a-z]{1,5}@[a-z]{1,5}\.(com|org)$/],
    [".{1,10}", /^[^\n]{1,10}$/u],
    ["\\S{1,6}", /^[^ \t\n\r\f\v]{1,6}$/u],
    // \s as ASCII white space, in and outside a class: never the engine's lone no-break-space byte.
    ["[\\d\\s]{3}\\s", /^[\d \t\n\r\f\v]{3}[ \t\n\r\f\v]$/u],
    // Classes with non-ASCII members (through kiln's grammar): whole characters, never a lone byte.
    ["[A-ZÀ-Þ][a-zß-ÿ]{1,8}", /^[A-ZÀ-Þ][a-zß-ÿ]{1,8}$/u],
    ["[^aé\\n]{2,6}!", /^[^aé\n]{2,6}!$/u],
    ["[一-龯ぁ-ん]{1,3}[\\D]?", /^[一-龯ぁ-ん]{1,3}\D?$/u],
  ];
  for (const [pattern, check] of patterns) {
    it(`regex ${pattern}: random walks match it`, async () => {
      const t = performance.now();
      engine.matcher({ type: "regex", pattern }).dispose();
      const compileMs = performance.now() - t;
      const outputs: string[] = [];
      for (let seed = 1; seed <= 8; seed++) {
        const m = engine.matcher({ type: "regex", pattern });
        const text = await randomWalk(m, seed);
        m.dispose();
        expect(text, `${JSON.stringify(text)} from ${pattern}`).toMatch(check);
        outputs.push(text);
      }
      console.log(JSON.stringify({ pattern, compileMs: +compileMs.toFixed(1), outputs }));
    });
  }

  it("regex and GBNF with long repetitions (written as kiln's grammar): random walks match them, counts held exactly", async () => {
    const long: Array<[string, RegExp]> = [
      ["[a-z ]{150,300}", /^[a-z ]{150,300}$/],
      ["(ab|c){70}!", /^(ab|c){70}!$/],
      ["x{65}-[0-9]{1,3}", /^x{65}-[0-9]{1,3}$/],
      [".{0,2000}", /^[^\n]{0,2000}$/u],
    ];
    for (const [pattern, check] of long) {
      const t = performance.now();
      engine.matcher({ type: "regex", pattern }).dispose();
      const compileMs = performance.now() - t;
      const lengths: number[] = [];
      for (let seed = 1; seed <= 4; seed++) {
        const m = engine.matcher({ type: "regex", pattern });
        const text = await randomWalk(m, seed, 0.3, 400);
        m.dispose();
        expect(text, `${JSON.stringify(text)} from ${pattern}`).toMatch(check);
        lengths.push([...text].length);
      }
      console.log(JSON.stringify({ pattern, compileMs: +compileMs.toFixed(1), lengths }));
    }
    // The same in a GBNF grammar: a plain element repeated past 128.
    const grammar: ConstraintSpec = { type: "grammar", grammar: 'root ::= "<" [a-z]{130,200} ">"' };
    for (let seed = 1; seed <= 2; seed++) {
      const m = engine.matcher(grammar);
      const text = await randomWalk(m, seed, 0.3, 400);
      m.dispose();
      expect(text).toMatch(/^<[a-z]{130,200}>$/);
    }
  });

  it("a schema's pattern with non-ASCII classes: random walks match it, whole characters; the class's members can be written, others not", async () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string", pattern: "^[A-ZÀ-Þ][a-zß-ÿ]{1,6}$" }, initial: { type: "string", pattern: "^[a-cé]$" } },
      required: ["name", "initial"],
      additionalProperties: false,
    };
    const spec: ConstraintSpec = { type: "json_schema", schema: JSON.stringify(schema) };
    const validate = new Ajv2020().compile(schema);
    for (let seed = 1; seed <= 8; seed++) {
      const m = engine.matcher(spec);
      const text = await randomWalk(m, seed, 0.3, 120);
      m.dispose();
      const value = JSON.parse(text);
      expect(validate(value), text).toBe(true);
      expect(value.name).toMatch(/^[A-ZÀ-Þ][a-zß-ÿ]{1,6}$/u);
    }
    await walk(engine.matcher(spec), '{"name": "Émilie", "initial": "é"}');
    for (const refused of ["d", "ж"]) {
      const other = engine.matcher(spec);
      for (const id of tokenizer.encode('{"name": "Zoë", "initial": "')) expect(other.accept(id)).toBe(true);
      expect(other.accept(tokenizer.encode(refused)[0]), refused).toBe(false);
      other.dispose();
    }
  });

  it("regex: . and \\S reach non-ASCII characters and '['; a complete match allows only stop tokens", async () => {
    await walk(engine.matcher({ type: "regex", pattern: ".{1,4}" }), "é😀[x");
    await walk(engine.matcher({ type: "regex", pattern: "[é-ê]+x" }), "éêx");
    const accented = engine.matcher({ type: "regex", pattern: "[é-ê]" });
    expect(accented.accept(tokenizer.encode("e")[0])).toBe(false);
    accented.dispose();
    await walk(engine.matcher({ type: "regex", pattern: "\\S{5}" }), "a[b]ü");
    const m = engine.matcher({ type: "regex", pattern: "\\d{3}" });
    expect(m.accept(tokenizer.encode("a")[0])).toBe(false);
    await walk(m, "123");
  });

  it("choice: random walks give one of the choices; each choice, the empty one too, can be written", async () => {
    const choices = ["yes", "no", "maybe so", "naïve ☃", "", 'say "hi"\\\n'];
    const spec: ConstraintSpec = { type: "choice", choices };
    const seen = new Set<string>();
    for (let seed = 1; seed <= 24; seed++) {
      const m = engine.matcher(spec);
      const text = await randomWalk(m, seed, 0.5);
      m.dispose();
      expect(choices).toContain(text);
      seen.add(text);
    }
    expect(seen.size).toBeGreaterThan(2);
    for (const c of choices.filter((c) => c !== "")) await walk(engine.matcher(spec), c);
    const empty = engine.matcher(spec);
    expect(allowedIds(await maskOf(empty)).some((id) => stopIds.includes(id))).toBe(true);
    expect(empty.accept(stopIds[0])).toBe(true);
    empty.dispose();
  });

  /** Whether `text` is a sum or difference of 1-3 digit numbers and parenthesized such expressions, whole. */
  const isArithmetic = (text: string): boolean => {
    let at = 0;
    const term = (): boolean => {
      if (text[at] === "(") {
        at++;
        return expr() && text[at++] === ")";
      }
      const digits = /^[0-9]{1,3}/.exec(text.slice(at));
      if (!digits) return false;
      at += digits[0].length;
      return true;
    };
    const expr = (): boolean => {
      if (!term()) return false;
      while (text[at] === "+" || text[at] === "-") {
        at++;
        if (!term()) return false;
      }
      return true;
    };
    return expr() && at === text.length;
  };
  // [GBNF, what the output must be]
  const grammars: Array<[string, (text: string) => boolean]> = [
    ['root ::= ("yes" | "no") "."', (t) => /^(yes|no)\.$/.test(t)],
    // Left recursion, a group over lines, a count.
    ['root ::= expr\nexpr ::= expr ("+" | "-") term | term\nterm ::= [0-9]{1,3} | "(" (\n  expr\n) ")"', isArithmetic],
    [
      '# a short list of quoted words\nroot ::= "[" item ("," item){0,3} "]"   # at most four\nitem ::= "\\"" [^"\\\\\\n]{1,6} "\\""',
      (t) => /^\["[^"\\\n]{1,6}"(,"[^"\\\n]{1,6}"){0,3}\]$/u.test(t),
    ],
    // Non-ASCII characters in a class and `.` are whole characters, never a lone byte.
    ['root ::= "\\u00e9" [\\U0001F600-\\U0001F602x-z] . [^a-z]', (t) => /^é[😀-😂x-z].[^a-z]$/su.test(t)],
    ['root ::= ("a"* "b"?)* "!" | ', (t) => /^((a*b?)*!)?$/.test(t)],
    // Japanese scripts (llama.cpp's japanese.gbnf), then a negated class that excludes a non-ASCII character.
    ["root ::= [一-龯ぁ-んァ-ン]{1,3} [^a-zé\\n]{2}", (t) => /^[一-龯ぁ-んァ-ン]{1,3}[^a-zé\n]{2}$/u.test(t)],
    // llama.cpp's list.gbnf and json.gbnf's string: NUL and non-ASCII characters named in negated classes.
    [
      'root ::= ("- " item){1,2}\nitem ::= [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]{1,6} "\\n"',
      (t) => /^(- [^\r\n\x0b\x0c\x85\u2028\u2029]{1,6}\n){1,2}$/u.test(t),
    ],
    [
      'root ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\bfnrt] | "u" [0-9a-fA-F]{4}) ){0,6} "\\""',
      (t) => /^"([^"\\\x7f\x00-\x1f]|\\(["\\bfnrt]|u[0-9a-fA-F]{4})){0,6}"$/u.test(t),
    ],
  ];
  for (const [grammar, holds] of grammars) {
    it(`grammar ${JSON.stringify(grammar)}: random walks derive from it`, async () => {
      const outputs: string[] = [];
      for (let seed = 1; seed <= 8; seed++) {
        const m = engine.matcher({ type: "grammar", grammar });
        const text = await randomWalk(m, seed, 0.4);
        m.dispose();
        expect(holds(text), `${JSON.stringify(text)} from ${grammar}`).toBe(true);
        outputs.push(text);
      }
      console.log(JSON.stringify({ grammar, outputs }));
    });
  }

  it("grammar: a derivable text can be written, a token that leaves the grammar is refused, and a bad grammar never reaches the engine", async () => {
    const arithmetic = 'root ::= expr\nexpr ::= expr ("+" | "-") term | term\nterm ::= [0-9]{1,3} | "(" expr ")"';
    const written = engine.matcher({ type: "grammar", grammar: arithmetic });
    await feed(written, "12+(3-45)-6");
    expect(allowedIds(await maskOf(written))).toContain(stopIds[0]);
    written.dispose();
    await walk(engine.matcher({ type: "grammar", grammar: 'root ::= [a-c\\u00e9-\\u00fc\\U0001F600-\\U0001F602]{4} "!"' }), "é😁üa!");
    await walk(engine.matcher({ type: "grammar", grammar: "root ::= [一-龯ぁ-んァ-ン]{1,3} [^a-zé\\n]{2}" }), "をンー!");
    const notE = engine.matcher({ type: "grammar", grammar: "root ::= [^é]" });
    expect(notE.accept(tokenizer.encode("é")[0])).toBe(false);
    notE.dispose();
    const m = engine.matcher({ type: "grammar", grammar: arithmetic });
    expect(m.accept(tokenizer.encode("+")[0])).toBe(false);
    m.dispose();
    for (const [grammar, message] of [
      ["root ::= foo", /line 1, column 10: rule "foo" is used but never defined/],
      ['root ::= "open', /line 1, column 10: the string literal is not closed/],
      ['start ::= "x"', /no "root" rule/],
      ['root ::= "a"\nroot ::= "b"', /line 2, column 1: rule "root" is defined twice/],
      ['root ::= "a"{1,10001}', /counts above/],
      ['root ::= ("a"+){500}', /counts above 128 are accepted only on/],
      ['root ::= "\\q"', /unknown escape/],
    ] as const) {
      expect(() => engine.matcher({ type: "grammar", grammar }), grammar).toThrow(message);
    }
    // The engine kept its instance: no abort reached it.
    await engine.settled();
    await walk(engine.matcher({ type: "grammar", grammar: 'root ::= "ok"' }), "ok");
  });

  it("thinkingFirst: a call's tag written while thinking is free text; after </think>, the trigger holds the call to its grammar", async () => {
    for (const opened of [false, true]) {
      const m = engine.matcher(thinkingFirst(triggered, opened));
      await feed(m, `${opened ? "" : "<think>"}\nI could write <tool_call> here, or {"name": 1}.\n</think>\n\nSure. <tool_call>`);
      const afterTrigger = await m.nextMask();
      expect(afterTrigger, `opened ${opened}`).not.toBeNull();
      expect(allowedIds(afterTrigger!).some((id) => stopIds.includes(id))).toBe(false);
      expect(m.accept(tokenizer.encode(" here")[0])).toBe(false);
      await feed(m, `\n{"name": "f", "arguments": {"city": "Oslo", "days": 2}${CALL_END}`);
      expect(m.accept(stopIds[0])).toBe(true);
      m.dispose();
    }
    // Without thinking, the answer is held to the call as before.
    const plain = engine.matcher(thinkingFirst(triggered, false));
    await feed(plain, "Sure. <tool_call>");
    expect(await plain.nextMask()).not.toBeNull();
    expect(plain.accept(tokenizer.encode(" here")[0])).toBe(false);
    plain.dispose();
  });

  it("thinkingFirst: a JSON schema, any object, a regex, a choice or a grammar holds after the thinking, which may hold anything", async () => {
    const cases: [ConstraintSpec, string][] = [
      [{ type: "grammar", grammar: 'root ::= "[" [0-9]+ ("," [0-9]+)* "]"' }, "[1,23]"],
      [{ type: "json_schema", schema: JSON.stringify(SCHEMA) }, JSON.stringify(INSTANCE)],
      [{ type: "json_object" }, '{"any": [1, {"b": null}], "c": "d"}'],
      [{ type: "regex", pattern: "[0-9]{3}-(ab|cd)" }, "123-cd"],
      // A regex kiln writes as its own grammar (a non-ASCII class), inside the structural tag too.
      [{ type: "regex", pattern: "[0-9][é-ê]{2}" }, "1êé"],
      [{ type: "choice", choices: ["yes", "no"] }, "no"],
      [{ type: "choice", choices: ["", "a.b", "(c)"] }, "(c)"],
      [{ type: "choice", choices: [""] }, ""],
    ];
    for (const [format, answer] of cases) {
      for (const opened of [false, true]) {
        const m = engine.matcher(thinkingFirst(format, opened));
        // Text no format here allows, then the line breaks such models write after the thinking.
        await feed(m, `${opened ? "" : "<think>"}\nMaybe {"name": 1}? Or 42, x.\n</think>\n\n`);
        expect(m.accept(tokenizer.encode("x")[0]), `${format.type}, opened ${opened}`).toBe(false);
        await walk(m, answer);
        m.dispose();
      }
      // Without thinking the answer is held to the format from its first token.
      const plain = engine.matcher(thinkingFirst(format, false));
      expect(plain.accept(tokenizer.encode("x")[0])).toBe(false);
      plain.dispose();
      if (answer === "") continue; // `<think>` may still begin
      const direct = engine.matcher(thinkingFirst(format, false));
      await walk(direct, answer);
      direct.dispose();
    }
  });

  it("triggered_tags: free text gets the null mask until the trigger, then only a valid call", async () => {
    const m = engine.matcher(triggered);
    const prose = "Let me check the weather for you, naïve ☃. <tool";
    expect((await feed(m, prose)).every((free) => free)).toBe(true);
    // The trigger's last token: from here only the call's fixed beginning.
    await feed(m, "_call>");
    const afterTrigger = await m.nextMask();
    expect(afterTrigger).not.toBeNull();
    expect(allowedIds(afterTrigger!).some((id) => stopIds.includes(id))).toBe(false);
    expect((await feed(m, '\n{"name": "f", "arguments": {"city":')).some((free) => free)).toBe(false);
    // The same JSON as json_schema: one space after the colon at most, no unknown key.
    const mask = await maskOf(m);
    expect(allowed(mask, tokenizer.encode(" ")[0])).toBe(true);
    const blanks = allowedIds(mask).filter((id) => /^ {2,}$/.test(tokenizer.decode([id])));
    expect(blanks).toEqual([]);
    await feed(m, ' "Paris","days":3');
    expect(m.accept(tokenizer.encode(",")[0])).toBe(false); // no third property
    await feed(m, "}");
    expect(m.accept(tokenizer.encode("\n\n")[0])).toBe(false); // the tag's end, exactly
    await feed(m, CALL_END);
    // Free again after the call; the output may end.
    expect(await m.nextMask()).toBeNull();
    expect(m.accept(stopIds[0])).toBe(true);
    expect(m.terminated).toBe(true);
    m.dispose();

    // Random walks from just after the trigger: every call they write is valid.
    let written = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const r = engine.matcher(triggered);
      await feed(r, "Sure. <tool_call>");
      const text = await randomWalk(r, seed, 0.9, 200);
      r.dispose();
      written += calls("Sure. <tool_call>" + text).length;
    }
    expect(written).toBeGreaterThanOrEqual(6);
  });

  it("tags_with_separator with at_least_one: a call from the first token, then a separator or the end", async () => {
    const m = engine.matcher(forced);
    const first = await m.nextMask();
    expect(first).not.toBeNull();
    const ids = allowedIds(first!);
    for (const id of ids) expect(CALL_BEGIN.startsWith(tokenizer.decode([id])), tokenizer.decode([id])).toBe(true);
    for (const id of stopIds) expect(ids).not.toContain(id);
    expect(m.accept(tokenizer.encode("Hello")[0])).toBe(false);
    await feed(m, CALL_BEGIN + '{"city":"Oslo","days":14}' + CALL_END);
    const next = allowedIds(await maskOf(m));
    expect(next.some((id) => stopIds.includes(id))).toBe(true);
    expect(next).toContain(tokenizer.encode("\n")[0]);
    await feed(m, "\n" + CALL_BEGIN + '{"city":"Rome","days":1}' + CALL_END);
    expect(m.accept(stopIds[0])).toBe(true);
    m.dispose();
    for (let seed = 1; seed <= 4; seed++) {
      const r = engine.matcher(forced);
      const text = await randomWalk(r, seed, 0.9, 200);
      r.dispose();
      expect(text.startsWith(CALL_BEGIN)).toBe(true);
      expect(calls(text).length).toBeGreaterThanOrEqual(1);
    }
  });

  it("refuses what the gate refuses, naming where, before the engine sees it", () => {
    const bad = {
      type: "triggered_tags",
      triggers: ["<tool_call>"],
      tags: [callTag, { ...callTag, content: { type: "json_schema", json_schema: { type: "object", properties: { x: { not: {} } } } } }],
    };
    let err: unknown;
    try {
      engine.matcher({ type: "structural_tag", format: JSON.stringify(bad) });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConstraintError);
    expect(err).toMatchObject({ path: "/tags/1/content/json_schema/properties/x/not", keyword: "not" });
    expect(() => engine.matcher({ type: "regex", pattern: "(?=a)b" })).toThrow(/lookahead/);
    expect(() => engine.matcher({ type: "choice", choices: [] })).toThrow(ConstraintError);
  });

  it("timing: mask cost per step, free text of a triggered_tags constraint vs a json_schema constraint", async () => {
    const row = new Float32Array(width);
    for (let i = 0; i < width; i++) row[i] = Math.sin(i) * 4;
    const steps = {
      schemaMask: [] as number[],
      schemaApply: [] as number[],
      freeMask: [] as number[],
      freeBans: [] as number[],
      freeFullApply: [] as number[],
    };
    // json_schema: per step, the mask, then the worker's copy of the row and the mask applied to it.
    const schema = engine.matcher({ type: "json_schema", schema: JSON.stringify(SCHEMA) });
    const target = new TextEncoder().encode(JSON.stringify(INSTANCE));
    for (let pos = 0; pos < target.length; ) {
      let t = performance.now();
      const mask = (await schema.nextMask())!;
      steps.schemaMask.push(performance.now() - t);
      t = performance.now();
      const copy = row.slice();
      applyTokenMask(copy, mask);
      steps.schemaApply.push(performance.now() - t);
      const id = pick(mask, target, pos);
      schema.accept(id);
      pos += tokenizer.tokenBytes(id).length;
    }
    schema.dispose();
    // Free text: the null mask, then the bans set in place and restored (what the worker does),
    // against what copying and masking the row would have cost.
    const free = engine.matcher(triggered);
    const prose = new TextEncoder().encode("The weather in Paris is mild in spring, with showers in April and warm days in May. ".repeat(2));
    const bans = engine.freeTextBans;
    const saved = new Float32Array(bans.length);
    for (let pos = 0; pos < prose.length; ) {
      let t = performance.now();
      const mask = await free.nextMask();
      steps.freeMask.push(performance.now() - t);
      expect(mask).toBeNull();
      t = performance.now();
      for (let i = 0; i < bans.length; i++) {
        saved[i] = row[bans[i]];
        row[bans[i]] = -Infinity;
      }
      for (let i = 0; i < bans.length; i++) row[bans[i]] = saved[i];
      steps.freeBans.push(performance.now() - t);
      t = performance.now();
      const copy = row.slice();
      applyTokenMask(copy, freeMask);
      steps.freeFullApply.push(performance.now() - t);
      const id = pick(freeMask, prose, pos);
      free.accept(id);
      pos += tokenizer.tokenBytes(id).length;
    }
    free.dispose();
    const ms = (xs: number[]) => summary(xs);
    console.log(
      JSON.stringify({
        freeTextBans: bans.length,
        jsonSchema: { nextMaskMs: ms(steps.schemaMask), copyAndApplyMs: ms(steps.schemaApply) },
        triggeredFreeText: { nextMaskMs: ms(steps.freeMask), bansInPlaceMs: ms(steps.freeBans), copyAndApplyAvoidedMs: ms(steps.freeFullApply) },
      }),
    );
  });
});

describe("random walks over schemas on SmolLM2's vocabulary", () => {
  /**
   * Random allowed tokens, leaning towards ending: half the time one holding a quote when any is
   * allowed (strings close), else often a one-byte token (a format's separators come). Stops with
   * a stop token when one is allowed, half the time. Undefined when no stop came.
   */
  async function leaningWalk(m: TokenMatcher, seed: number, maxTokens = 300): Promise<string | undefined> {
    const rng = Xoshiro128ss.fromSeed(seed);
    const out: number[] = [];
    for (let step = 0; step < maxTokens; step++) {
      const ids = allowedIds(await maskOf(m));
      const stops = ids.filter((id) => stopIds.includes(id));
      const others = ids.filter((id) => !stopIds.includes(id));
      if (stops.length > 0 && (others.length === 0 || rng.nextFloat() < 0.5)) {
        expect(m.accept(stops[0])).toBe(true);
        return tokenizer.decode(out);
      }
      expect(others.length, `an empty mask after ${JSON.stringify(tokenizer.decode(out))}`).toBeGreaterThan(0);
      const quotes = others.filter((id) => tokenizer.tokenBytes(id).includes(0x22));
      const short = others.filter((id) => tokenizer.tokenBytes(id).length === 1);
      const r = rng.nextFloat();
      const pool = quotes.length > 0 && r < 0.5 ? quotes : short.length > 0 && r < 0.8 ? short : others;
      const id = pool[Math.floor(rng.nextFloat() * pool.length)];
      expect(m.accept(id)).toBe(true);
      out.push(id);
    }
    return undefined;
  }

  const FORMATS = [
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
  ];

  it("any JSON object, the structured-output tests' schemas and every string format kiln takes: each walk is JSON that validates", async () => {
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    const problems: string[] = [];
    for (let seed = 1; seed <= 12; seed++) {
      const m = engine.matcher({ type: "json_object" });
      const text = await leaningWalk(m, seed, 300);
      m.dispose();
      if (text !== undefined) {
        try {
          const v = JSON.parse(text);
          if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Error("not an object");
        } catch (e) {
          problems.push(`json_object/${seed}: ${String(e)}: ${JSON.stringify(text)}`);
        }
      } else problems.push(`json_object/${seed}: no end`);
    }
    const schemas = [
      ...structuredSchemas(30).map((s) => ({ name: s.name, schema: s.schema, seeds: 4 })),
      ...FORMATS.map((f) => ({
        name: f,
        schema: { type: "object", properties: { v: { type: "string", format: f } }, required: ["v"], additionalProperties: false },
        seeds: 8,
      })),
    ];
    for (const { name, schema, seeds } of schemas) {
      const validate = ajv.compile(schema);
      let ended = 0;
      for (let seed = 1; seed <= seeds; seed++) {
        const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(schema) });
        const text = await leaningWalk(m, seed);
        m.dispose();
        if (text === undefined) continue;
        ended++;
        let value: unknown;
        try {
          value = JSON.parse(text);
        } catch {
          problems.push(`${name}/${seed}: not JSON: ${JSON.stringify(text)}`);
          continue;
        }
        if (!validate(value)) problems.push(`${name}/${seed}: ${ajv.errorsText(validate.errors)}: ${JSON.stringify(text)}`);
      }
      if (ended === 0) problems.push(`${name}: no walk ended`);
    }
    expect(problems).toEqual([]);
  }, 120_000);

  it("schema patterns with quotes, backslashes, control characters, \\s and length bounds: each walk is JSON whose value matches the pattern", async () => {
    const patterns: Array<[string, number?]> = [
      ['^say "[a-z]{1,4}"$'],
      ["^[A-Za-z\\s]{1,12}$"],
      ["^a\\\\b[0-9]$"],
      ["^line\\n[a-z]{1,3}\\t!$"],
      ["^[\"']?[a-z]{1,5}$"],
      ["^\\w+(\\s\\w+){0,2}$"],
      ["^[^,]{1,6}$"],
      // One class repeated beside a length bound: the bound holds too.
      ["^[a-z ]+$", 12],
      ["^[^,]*$", 7],
    ];
    const problems: string[] = [];
    for (const [pattern, maxLength] of patterns) {
      const v = { type: "string", pattern, ...(maxLength !== undefined ? { maxLength } : {}) };
      const schema = { type: "object", properties: { v }, required: ["v"], additionalProperties: false };
      const matches = new RegExp(pattern, "u");
      let ended = 0;
      for (let seed = 1; seed <= 10; seed++) {
        const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(schema) });
        const text = await leaningWalk(m, seed, 200);
        m.dispose();
        if (text === undefined) continue;
        ended++;
        let value: { v: string };
        try {
          value = JSON.parse(text) as { v: string };
        } catch {
          problems.push(`${pattern}/${seed}: not JSON: ${JSON.stringify(text)}`);
          continue;
        }
        if (!matches.test(value.v)) problems.push(`${pattern}/${seed}: ${JSON.stringify(value.v)} does not match`);
        if (maxLength !== undefined && [...value.v].length > maxLength) problems.push(`${pattern}/${seed}: ${JSON.stringify(value.v)} is over ${maxLength}`);
      }
      if (ended === 0) problems.push(`${pattern}: no walk ended`);
    }
    expect(problems).toEqual([]);
  });
});

describe("tool calls or an output format on SmolLM2's vocabulary", () => {
  const WEATHER = { name: "get_weather", parameters: CITY };
  const TIME = {
    name: "get_time",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"], additionalProperties: false },
  };
  const ANSWER = {
    type: "object",
    properties: { answer: { type: "string", maxLength: 16 }, sure: { type: "boolean" } },
    required: ["answer", "sure"],
    additionalProperties: false,
  };
  const validArgs = { get_weather: new Ajv2020().compile(CITY), get_time: new Ajv2020().compile(TIME.parameters) };
  const validAnswer = new Ajv2020().compile(ANSWER);

  /** The text read back as the chat route reads it: content, and calls with their arguments. */
  function readBack(syntax: typeof hermes.syntax, text: string): { content: string; calls: Array<{ name: string; args: string }> } {
    const parser = new CallParser(syntax, () => "call_x");
    const pieces: ToolOutputPiece[] = [...parser.push(text), ...parser.finish()];
    const out = { content: "", calls: [] as Array<{ name: string; args: string }> };
    for (const p of pieces) {
      if (p.type === "content") out.content += p.text;
      else if (p.type === "call-start") out.calls.push({ name: p.name, args: "" });
      else out.calls[p.index].args += p.text;
    }
    return out;
  }

  for (const dialect of [hermes, smollm2, mistral, llama3]) {
    it(`${dialect.name}: an answer is calls alone or content in the format alone, and both can be written`, async () => {
      const format: ConstraintSpec = { type: "json_schema", schema: JSON.stringify(ANSWER) };
      const spec = toolConstraint(dialect.syntax, { tools: [WEATHER, TIME], choice: "auto", parallel: true }, format);
      const seen = { calls: 0, content: 0 };
      for (let seed = 1; seed <= 10; seed++) {
        const m = engine.matcher(spec);
        const text = await randomWalk(m, seed, 0.9, 200);
        m.dispose();
        const read = readBack(dialect.syntax, text);
        if (read.calls.length > 0) {
          seen.calls++;
          expect(read.content.trim(), text).toBe("");
          for (const call of read.calls) expect(validArgs[call.name as keyof typeof validArgs](JSON.parse(call.args)), text).toBe(true);
        } else {
          seen.content++;
          expect(validAnswer(JSON.parse(read.content)), text).toBe(true);
        }
      }
      expect(seen.calls).toBeGreaterThan(0);
      expect(seen.content).toBeGreaterThan(0);
      // Each alternative written in full ends the answer; content then a call does not go.
      const content = '{"answer": "Oslo", "sure": true}';
      const afterContent = engine.matcher(spec);
      await feed(afterContent, content);
      expect(allowedIds(await maskOf(afterContent)).every((id) => stopIds.includes(id))).toBe(true);
      afterContent.dispose();
      const head = `{"name": "get_time", "${dialect.syntax.argumentsKey}": `;
      const call = dialect.syntax.array
        ? `${dialect.syntax.open}[${head}{"zone": "UTC"}}]${dialect.syntax.close}`
        : `${dialect.syntax.open}${dialect.syntax.pad}${head}{"zone": "UTC"}}${dialect.syntax.pad}${dialect.syntax.close}`;
      const afterCall = engine.matcher(spec);
      await feed(afterCall, call);
      expect(allowedIds(await maskOf(afterCall)).some((id) => stopIds.includes(id))).toBe(true);
      expect(afterCall.accept(stopIds[0])).toBe(true);
      afterCall.dispose();
      expect(readBack(dialect.syntax, call).calls).toEqual([{ name: "get_time", args: '{"zone": "UTC"}' }]);
    });
  }

  it("every kind of format beside calls: any object, a regex, a choice (an empty one too) and a grammar", async () => {
    // Any object: its strings go on too long for random walks, so one is written, then only the end may come.
    const anyObject = engine.matcher(toolConstraint(hermes.syntax, { tools: [TIME], choice: "auto", parallel: false }, { type: "json_object" }));
    await feed(anyObject, '{"a": [1, {"b": null}], "c": "d"}');
    expect(allowedIds(await maskOf(anyObject)).every((id) => stopIds.includes(id))).toBe(true);
    anyObject.dispose();
    const formats: Array<[ConstraintSpec, (text: string) => boolean]> = [
      [{ type: "regex", pattern: "[A-Z][a-z]{2,6}" }, (t) => /^[A-Z][a-z]{2,6}$/.test(t)],
      [{ type: "choice", choices: ["yes", "no", "", "naïve ☃"] }, (t) => ["yes", "no", "", "naïve ☃"].includes(t)],
      [{ type: "grammar", grammar: 'root ::= "(" [0-9]+ ")"' }, (t) => /^\([0-9]+\)$/.test(t)],
    ];
    for (const [format, valid] of formats) {
      const spec = toolConstraint(hermes.syntax, { tools: [TIME], choice: "auto", parallel: false }, format);
      let contents = 0;
      for (let seed = 1; seed <= 8; seed++) {
        const m = engine.matcher(spec);
        const text = await randomWalk(m, seed, 0.5, 200);
        m.dispose();
        const read = readBack(hermes.syntax, text);
        if (read.calls.length > 0) expect(read.calls.length, text).toBe(1);
        else {
          contents++;
          expect(valid(read.content), `${format.type}: ${JSON.stringify(text)}`).toBe(true);
        }
      }
      expect(contents, format.type).toBeGreaterThan(0);
    }
  });

  it("a forced choice beside a format makes calls, as without one", () => {
    const format: ConstraintSpec = { type: "json_schema", schema: JSON.stringify(ANSWER) };
    for (const choice of ["required", { name: "get_time" }] as const) {
      const use = { tools: [WEATHER, TIME], choice, parallel: true };
      expect(toolConstraint(hermes.syntax, use, format)).toEqual(toolConstraint(hermes.syntax, use));
    }
  });
});

describe("bounded integers on SmolLM2's vocabulary", () => {
  const AGE = { type: "object", properties: { age: { type: "integer", minimum: 0, maximum: 120 } }, required: ["age"], additionalProperties: false };
  const ageTag = { type: "tag", begin: "<a>", content: { type: "json_schema", json_schema: AGE }, end: "</a>" };
  const shapes: Array<[string, ConstraintSpec, string, string]> = [
    ["json_schema", { type: "json_schema", schema: JSON.stringify(AGE) }, "", ""],
    [
      "a tag in tags_with_separator",
      { type: "structural_tag", format: JSON.stringify({ type: "tags_with_separator", tags: [ageTag], separator: "\n", at_least_one: true }) },
      "<a>",
      "</a>",
    ],
    ["a tag alone", { type: "structural_tag", format: JSON.stringify(ageTag) }, "<a>", "</a>"],
  ];
  for (const [name, spec, begin, end] of shapes) {
    it(`${name}: {age: 0..120} refuses 123 and 121..129, accepts 120`, async () => {
      const m = engine.matcher(spec);
      await feed(m, begin + '{"age":12');
      // After "12" only a 0 may follow among digits: 120 is the top.
      const digitTokens = allowedIds(await maskOf(m))
        .map((id) => tokenizer.decode([id]))
        .filter((t) => /^[0-9]/.test(t));
      expect(digitTokens.length).toBeGreaterThan(0);
      for (const t of digitTokens) expect(t, `"12" then ${JSON.stringify(t)}`).toMatch(/^0(?![0-9])/);
      for (const d of "123456789") expect(m.accept(tokenizer.encode(d)[0]), `12${d}`).toBe(false);
      await feed(m, "0}" + end);
      expect(allowedIds(await maskOf(m)).some((id) => stopIds.includes(id))).toBe(true);
      expect(m.accept(stopIds[0])).toBe(true);
      m.dispose();

      // Random walks write only ages within the bounds.
      for (let seed = 1; seed <= 6; seed++) {
        const r = engine.matcher(spec);
        const text = await randomWalk(r, seed, 0.9, 40);
        r.dispose();
        const json = text.slice(begin.length, text.indexOf(end, begin.length) >= 0 && end !== "" ? text.indexOf(end, begin.length) : undefined);
        const age = (JSON.parse(json) as { age: number }).age;
        expect(Number.isInteger(age) && age >= 0 && age <= 120, text).toBe(true);
      }
    });
  }

  it("two tags with different ranges each keep their own", async () => {
    const small = {
      ...ageTag,
      begin: "<b>",
      end: "</b>",
      content: { type: "json_schema", json_schema: { ...AGE, properties: { age: { type: "integer", minimum: -5, maximum: 5 } } } },
    };
    const spec: ConstraintSpec = {
      type: "structural_tag",
      format: JSON.stringify({ type: "tags_with_separator", tags: [ageTag, small], separator: "\n", at_least_one: true }),
    };
    const m = engine.matcher(spec);
    await feed(m, '<a>{"age":120}</a>\n<b>{"age":-');
    expect(m.accept(tokenizer.encode("6")[0])).toBe(false);
    await feed(m, '5}</b>\n<b>{"age":');
    expect(m.accept(tokenizer.encode("1")[0])).toBe(true);
    for (const d of "0123456789") expect(m.accept(tokenizer.encode(d)[0]), `1${d}`).toBe(false);
    await feed(m, '}</b>\n<a>{"age":12');
    expect(m.accept(tokenizer.encode("1")[0])).toBe(false);
    await feed(m, "0}</a>");
    expect(m.accept(stopIds[0])).toBe(true);
    m.dispose();
  });
});
