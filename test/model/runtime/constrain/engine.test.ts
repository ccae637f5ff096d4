// Claim: with SmolLM2's real vocabulary, the constraint engine's masks let a valid JSON text through
// token by token (longest allowed token each step, as a greedy model would), refuse tokens that break
// the grammar, allow only stop tokens once the JSON is complete, and survive engine aborts.
import { Ajv2020 } from "ajv/dist/2020.js";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { readTokenizerSpec, type TokenizerSpec } from "../../../../src/runtime/artifact/index.js";
import { ConstraintEngine, ConstraintError, type TokenMatcher } from "../../../../src/runtime/constrain/index.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { compiledArtifact } from "../../../support/model.js";

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
});

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
    const mask = await m.nextMask();
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
  const end = allowedIds(await m.nextMask());
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
  return { n: s.length, mean: r(s.reduce((a, b) => a + b, 0) / s.length), p50: r(s[s.length >> 1]), p90: r(s[Math.floor(s.length * 0.9)]), max: r(s[s.length - 1]) };
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
    console.log(JSON.stringify({ engineCreateMs: Math.round(createMs), schemaCompileMs: +compileMs.toFixed(1), cachedMatcherMs: +cachedMs.toFixed(2), tokens, maskMs: summary(maskMs) }));
  });

  it("json_object: walks a nested object; refuses a top-level array and whitespace", async () => {
    const text = JSON.stringify({ a: [1, -2.5e3, { b: null }], "c\"d": "x\\ny", e: {}, f: [], g: false });
    const m = engine.matcher({ type: "json_object" });
    const { maskMs, tokens } = await walk(m, text);
    m.dispose();
    console.log(JSON.stringify({ jsonObjectTokens: tokens, maskMs: summary(maskMs) }));

    const fresh = engine.matcher({ type: "json_object" });
    const first = await fresh.nextMask();
    const bracket = tokenizer.encode("[")[0];
    expect(allowed(first, bracket)).toBe(false);
    expect(fresh.accept(bracket)).toBe(false);
    expect(fresh.accept(tokenizer.encode("{")[0])).toBe(true);
    const space = tokenizer.encode(" ")[0];
    expect(allowed(await fresh.nextMask(), space)).toBe(false);
    expect(fresh.accept(space)).toBe(false);
    fresh.dispose();
  });

  it("refuses a token that breaks the schema, and control tokens inside strings", async () => {
    const m = engine.matcher({ type: "json_schema", schema: JSON.stringify(SCHEMA) });
    for (const id of tokenizer.encode('{"name":"Ada","age":')) {
      await m.nextMask();
      expect(m.accept(id)).toBe(true);
    }
    const mask = await m.nextMask();
    const quote = tokenizer.encode('"')[0];
    const minus = tokenizer.encode("-")[0];
    expect(allowed(mask, quote)).toBe(false);
    expect(m.accept(quote)).toBe(false); // a string where an integer must be
    expect(m.accept(minus)).toBe(false); // minimum 0
    for (const id of stopIds) expect(m.accept(id)).toBe(false); // incomplete
    expect(m.accept(tokenizer.encode("7")[0])).toBe(true);
    m.dispose();

    const s = engine.matcher({ type: "json_schema", schema: JSON.stringify({ type: "object", properties: { s: { type: "string" } }, required: ["s"], additionalProperties: false }) });
    for (const id of tokenizer.encode('{"s":"')) expect(s.accept(id)).toBe(true);
    const inString = await s.nextMask();
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
