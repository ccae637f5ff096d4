/**
 * JSON schemas for the structured-output tests and benchmark: hand-written ones covering each
 * keyword kiln enforces, and generated ones (seeded, so the set is fixed) nesting them. Strings are
 * short and bounded so that a 135M model's output always ends well inside its token budget.
 */

export interface NamedSchema {
  name: string;
  /** What to ask the model for. */
  ask: string;
  schema: Record<string, unknown>;
}

const object = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
  ...extra,
});
const word = (maxLength = 12) => ({ type: "string", minLength: 1, maxLength });

const HAND_WRITTEN: NamedSchema[] = [
  { name: "person", ask: "a person with a name and an age", schema: object({ name: word(), age: { type: "integer", minimum: 0, maximum: 120 } }) },
  { name: "flag", ask: "whether the sky is blue", schema: object({ answer: { type: "boolean" } }) },
  { name: "colour", ask: "your favourite colour", schema: object({ colour: { enum: ["red", "green", "blue", "yellow"] } }) },
  { name: "constant", ask: "the version", schema: object({ version: { const: "v1" }, ok: { type: "boolean" } }) },
  { name: "nothing", ask: "an empty result", schema: object({ result: { type: "null" } }) },
  { name: "tags", ask: "three tags for a cooking blog", schema: object({ tags: { type: "array", items: word(10), minItems: 1, maxItems: 3 } }) },
  {
    name: "point",
    ask: "a point on a grid",
    schema: object({ x: { type: "integer", minimum: -10, maximum: 10 }, y: { type: "integer", minimum: -10, maximum: 10 } }),
  },
  { name: "price", ask: "the price of a coffee", schema: object({ amount: { type: "number" }, currency: { enum: ["EUR", "USD", "GBP"] } }) },
  {
    name: "maybe-count",
    ask: "how many moons Mars has, if known",
    schema: object({ count: { anyOf: [{ type: "integer", minimum: 0, maximum: 100 }, { type: "null" }] } }),
  },
  {
    name: "address",
    ask: "an address",
    schema: object({ street: word(16), city: word(), zip: { type: "string", pattern: "^[0-9]{5}$" } }),
  },
  {
    name: "order",
    ask: "a small shop order",
    schema: object({
      id: { type: "integer", minimum: 1, maximum: 9999 },
      items: { type: "array", minItems: 1, maxItems: 3, items: object({ product: word(), quantity: { type: "integer", minimum: 1, maximum: 9 } }) },
    }),
  },
  {
    name: "refs",
    ask: "a trip between two cities",
    schema: { ...object({ from: { $ref: "#/$defs/city" }, to: { $ref: "#/$defs/city" } }), $defs: { city: object({ name: word(), country: word() }) } },
  },
  {
    name: "shape",
    ask: "a shape",
    schema: object({
      shape: {
        anyOf: [
          object({ kind: { const: "circle" }, radius: { type: "integer", minimum: 1, maximum: 50 } }),
          object({ kind: { const: "square" }, side: { type: "integer", minimum: 1, maximum: 50 } }),
        ],
      },
    }),
  },
  {
    name: "described",
    ask: "a book",
    schema: object(
      { title: { ...word(20), description: "the book's title" }, pages: { type: "integer", minimum: 1, maximum: 2000, description: "page count" } },
      { description: "A book." },
    ),
  },
  { name: "date", ask: "today's date", schema: object({ date: { type: "string", format: "date" } }) },
  { name: "email", ask: "a contact email", schema: object({ email: { type: "string", pattern: "^[a-z]{1,10}@[a-z]{1,10}\\.com$" } }) },
  {
    name: "grid",
    ask: "a 2x2 grid of digits",
    schema: object({
      rows: { type: "array", minItems: 2, maxItems: 2, items: { type: "array", minItems: 2, maxItems: 2, items: { type: "integer", minimum: 0, maximum: 9 } } },
    }),
  },
  {
    name: "nested",
    ask: "a company with its boss",
    schema: object({ company: object({ name: word(), boss: object({ name: word(), since: { type: "integer", minimum: 1900, maximum: 2030 } }) }) }),
  },
  {
    name: "weekday",
    ask: "a day of the week",
    schema: object({ day: { type: "string", enum: ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"] } }),
  },
  {
    name: "ratings",
    ask: "ratings of three films",
    schema: object({ ratings: { type: "array", minItems: 3, maxItems: 3, items: { type: "integer", minimum: 1, maximum: 5 } } }),
  },
];

/** A small seeded generator (mulberry32), so the generated set is the same on every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"];
const TOPICS = ["a pet", "a city", "a recipe", "a sports team", "a planet", "a car", "a song", "a garden", "a robot", "a holiday"];

function leaf(rand: () => number, depth: number): Record<string, unknown> {
  const pick = Math.floor(rand() * (depth < 2 ? 9 : 7));
  const lo = Math.floor(rand() * 10);
  switch (pick) {
    case 0:
      return { type: "boolean" };
    case 1:
      return { type: "integer", minimum: lo, maximum: lo + 1 + Math.floor(rand() * 100) };
    case 2:
      return { enum: NAMES.slice(Math.floor(rand() * 6), 8 + Math.floor(rand() * 4)) };
    case 3:
      return word(6 + Math.floor(rand() * 10));
    case 4:
      return { anyOf: [{ type: "integer", minimum: 0, maximum: 9 }, { type: "null" }] };
    case 5:
      return { type: "array", minItems: 1, maxItems: 1 + Math.floor(rand() * 3), items: rand() < 0.5 ? { type: "integer", minimum: 0, maximum: 99 } : word(8) };
    case 6:
      return { const: NAMES[Math.floor(rand() * NAMES.length)] };
    default:
      return objectOf(rand, depth + 1);
  }
}

function objectOf(rand: () => number, depth: number): Record<string, unknown> {
  const count = 1 + Math.floor(rand() * (depth === 0 ? 4 : 2));
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) properties[NAMES[(i * 5 + Math.floor(rand() * 12)) % NAMES.length] + (i > 0 ? `_${i}` : "")] = leaf(rand, depth);
  return object(properties);
}

/** `count` schemas: the hand-written ones first, then generated ones (some through $defs/$ref). */
export function structuredSchemas(count = 100): NamedSchema[] {
  const out = [...HAND_WRITTEN];
  const rand = random(20261123);
  for (let i = 0; out.length < count; i++) {
    let schema = objectOf(rand, 0);
    if (i % 5 === 0) schema = { ...object({ item: { $ref: "#/$defs/item" }, note: word(8) }), $defs: { item: schema } };
    out.push({ name: `generated-${i}`, ask: TOPICS[i % TOPICS.length], schema });
  }
  return out.slice(0, count);
}
