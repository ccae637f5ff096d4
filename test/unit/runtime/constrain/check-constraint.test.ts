// Claim: checkConstraint (pure JS) accepts the regexes, choices and structural tags the engine
// enforces as written, and refuses everything else before the engine sees it (engine errors are
// WASM aborts), naming the construct, the place (a JSON pointer) and the keyword or field.
import { describe, expect, it } from "vitest";
import { checkConstraint, ConstraintError, type ConstraintSpec } from "../../../../src/runtime/constrain/index.js";
import {
  enginePattern,
  engineRegex,
  MAX_LONG_REPEAT_BOUND,
  MAX_REPEAT_BOUND,
  regexProblem,
  schemaEnginePattern,
  schemaPatternProblem,
} from "../../../../src/runtime/constrain/regex.js";

function refusal(spec: ConstraintSpec): ConstraintError {
  try {
    checkConstraint(spec);
  } catch (e) {
    expect(e).toBeInstanceOf(ConstraintError);
    return e as ConstraintError;
  }
  throw new Error(`accepted: ${JSON.stringify(spec)}`);
}

const regex = (pattern: string): ConstraintSpec => ({ type: "regex", pattern });
const tagged = (format: unknown): ConstraintSpec => ({ type: "structural_tag", format: JSON.stringify(format) });
const schema = (s: unknown) => ({ type: "json_schema", json_schema: s });
const call = (name: string, parameters: unknown = { type: "object" }) => ({
  type: "tag",
  begin: `<tool_call>\n{"name": "${name}", "arguments": `,
  content: schema(parameters),
  end: "}\n</tool_call>",
});

describe("regex", () => {
  const accepted = [
    "[0-9]{3}-[a-z]+",
    "^(?:cat|dog)s?$",
    "(?<word>[A-Za-z]+)( (?<more>[a-z]+)){0,3}",
    "-?(0|[1-9][0-9]{0,5})(\\.[0-9]{1,3})?",
    '"[^"\\\\\\n]*"',
    "\\d+\\.\\d*|\\.\\d+",
    "[\\w.-]+@[\\w-]+\\.(com|org)",
    "(a|)b",
    "a*?b+?c??d{2}?",
    "\\x41\\u00e9\\u{1F600}\\U0001F600\\cA\\t\\n\\-\\'\\\"",
    "[\\b\\]\\[\\\\a^-]",
    "[a-z-9]",
    "naïve ☃.😀",
    "^a$|^b$",
    "(^a|b)c",
    "a}]",
    `a{${MAX_REPEAT_BOUND}}`,
    // Long repetitions of what holds nothing repeated, in no repeated group.
    `a{${MAX_LONG_REPEAT_BOUND}}`,
    "[^\\n]{1,3000}",
    "(ab|c){1,3000}x{65}",
    "(x{100})?y",
    "[a-z]{100}[0-9]{100}[A-Z]{100}[ ]{100}",
  ];
  for (const p of accepted) it(`accepts ${JSON.stringify(p)}`, () => expect(regexProblem(p)).toBeUndefined());

  const refused: Array<[string, RegExp]> = [
    ["", /empty/],
    ["a(?=b)", /lookahead \(\?=.*index 1/],
    ["a(?!b)", /lookahead/],
    ["(?<=a)b", /lookbehind/],
    ["(?<!a)b", /lookbehind/],
    ["(a)\\1", /backreference \\1/],
    ["(?<x>a)\\k<x>", /named backreference/],
    ["(?i)abc", /inline flag/],
    ["(?i:abc)", /inline flag/],
    ["(?P<x>a)", /Python-style/],
    ["(?#note)a", /comment/],
    ["(?<n1>a)", /group name/],
    ["a^b", /anchor '\^' inside the pattern at index 1/],
    ["a$b", /anchor '\$'/],
    ["x(^a)", /anchor/],
    ["(a$)b", /anchor/],
    ["(^a)*", /anchor/],
    ["\\bword", /word boundary/],
    ["\\p{L}+", /Unicode property/],
    ["[\\p{L}]", /Unicode property/],
    ["a|", /empty alternative/],
    ["|a", /empty alternative/],
    ["(|a)", /empty alternative/],
    ["a||b", /empty alternative/],
    ["(a|^)", /empty alternative/],
    ["a{,3}", /'\{' that does not start a repetition/],
    ["a{x}", /'\{'/],
    ["a{3,2}", /out of order/],
    [`a{${MAX_LONG_REPEAT_BOUND + 1}}`, /repetition count over 10000/],
    ["(a+){65}", /over 64 \(\{65\}\) of a group with a repetition inside/],
    ["(ab{2}){100}", /of a group with a repetition inside/],
    ["(a{65})*", /over 64 inside a repeated group/],
    ["(b(a{65})){2}", /inside a repeated group/],
    ["a{65}b{65}c{65}d{65}e{65}", /more than 4 repetitions with counts over 64/],
    ["(a{10}){30}", /multiply/],
    ["*a", /nothing to repeat/],
    ["^*a", /nothing to repeat/],
    ["a**", /second quantifier/],
    ["a{2}{3}", /second quantifier/],
    ["a???", /second quantifier/],
    ["(a", /unclosed group/],
    ["a)", /unmatched '\)'/],
    ["[a", /unclosed character class/],
    ["[]a]", /empty character class/],
    ["[\\^a]", /escaped '\^' first in a class/],
    ["[z-a]", /range out of order/],
    ["[\\d-z]", /range with a class escape/],
    ["[[:alpha:]]", /POSIX/],
    ["a\\", /trailing backslash/],
    ["\\z", /unknown escape \\z/],
    ["\\e", /unknown escape/],
    ["\\0", /NUL/],
    ["\\x00", /NUL/],
    ["a\u0000", /NUL/],
    ["\\x41B", /followed by a hex digit/],
    ["\\xG1", /two hex digits/],
    ["\\u12", /4 hex digits/],
    ["\\uD83D\\uDE00", /surrogate/],
    ["\ud800", /lone surrogate/],
    ["\\c1", /\\c escape/],
  ];
  for (const [p, why] of refused) {
    it(`refuses ${JSON.stringify(p)}`, () => {
      const e = refusal(regex(p));
      expect(e.message).toMatch(why);
      expect(e.keyword).toBe("pattern");
      expect(e.path).toBe("");
    });
  }

  it("sends a pattern with a class the engine's regex converter reads as bytes through kiln's grammar; a schema pattern writes such classes out, or refuses them", () => {
    const wide: Array<[string, RegExp | string]> = [
      ["[é-ê]", "(?:é|ê)"],
      ["^[A-Za-zÀ-Â .'-]+$", "^(?:[A-Za-z .'\\-]|À|Á|Â)+$"],
      // ASCII members that are not letters or digits: \xHH only last, as the engine reads every hex digit after \x.
      ["[-aé\\x7f]", "(?:[\\-a\\x7f]|é)"],
      ["[\\u00e9x]{2}", "(?:[x]|é){2}"],
      ["[^é]", /a negated character class with non-ASCII members/],
      ["[一-龯]", /a character class of 20912 non-ASCII characters \(at most 256/],
      ["[\\S]", /\\S inside a character class/],
      ["[\\D]", /\\D inside/],
    ];
    for (const [pattern, out] of wide) {
      expect(regexProblem(pattern)).toBeUndefined();
      expect(enginePattern(pattern)).toHaveProperty("ebnf");
      if (typeof out === "string") {
        expect(schemaPatternProblem(pattern), pattern).toBeUndefined();
        expect(schemaEnginePattern(pattern)).toBe(out);
      } else expect(schemaPatternProblem(pattern)).toMatch(out);
    }
    // Items, groups, counts and escapes keep their meaning: `.` is any character but a newline, \d ASCII digits, anchors match nothing.
    expect(enginePattern("^(?:a|[à-ÿ]+)\\d{2,}.\\W?$")).toEqual({
      ebnf: 'root ::= ("a" | ([\\u00c3\\u00c3] [\\u00a0-\\u00bf])+) [0-9]{2,} [^\\u000a] [^0-9A-Z_a-z]?',
    });
    expect(enginePattern("[a-z]+\\.(com|org)")).toEqual({ regex: "[a-z]+\\.(com|org)" });
    // A long repetition goes as a grammar too, which the engine compiles without unrolling it.
    expect(enginePattern("[a-z]{1,3000}")).toEqual({ ebnf: "root ::= [a-z]{1,3000}" });
    expect(schemaPatternProblem("[a-z]{1,3000}")).toMatch(/repetition count over 64/);
  });

  it("rewrites ., \\s and \\S for the engine (\\s as ASCII white space); a schema pattern must not use \\S outside a class", () => {
    expect(engineRegex("a.b\\.[.]\\S+[\\s]\\s")).toBe("a[^\\n]b\\.[.][^\\t\\n\\x0b\\f\\r ]+[\\t\\n\\x0b\\f\\r ][\\t\\n\\x0b\\f\\r ]");
    expect(engineRegex("\\\\S")).toBe("\\\\S");
    expect(regexProblem("\\S+")).toBeUndefined();
    expect(schemaPatternProblem("^\\S+$")).toMatch(/\\S outside a character class/);
    expect(schemaPatternProblem("^[^\\s]+$")).toBeUndefined();
  });

  it("a schema pattern matches the string's JSON text: what JSON holds only escaped is matched as its escape", () => {
    const cases: Array<[string, string]> = [
      ['^say "hi"$', '^say (?:\\\\")hi(?:\\\\")$'],
      ['^a\\"b$', '^a(?:\\\\")b$'],
      ["^a\\\\b$", "^a(?:\\\\\\\\)b$"],
      ["^a\\nb\\t$", "^a(?:\\\\n)b(?:\\\\t)$"],
      ["^\\x01$", "^(?:\\\\u0001)$"],
      ["^a\\sb$", "^a(?: |\\\\[tnrf]|\\\\u000b)b$"],
      ["^[A-Za-z\\s]+$", "^(?:[A-Za-z ]|(?:\\\\t)|(?:\\\\n)|(?:\\\\u000b)|(?:\\\\f)|(?:\\\\r))+$"],
      ["^[\"']x$", "^(?:[']|(?:\\\\\"))x$"],
      ["^[\\b]$", "^(?:(?:\\\\b))$"],
      ['^[^"\\n]+$', '^[^"\\n]+$'],
      ["^[a-z]+$", "^[a-z]+$"],
    ];
    for (const [pattern, out] of cases) {
      expect(schemaPatternProblem(pattern), pattern).toBeUndefined();
      expect(schemaEnginePattern(pattern), pattern).toBe(out);
    }
  });
});

describe("choice", () => {
  it("accepts any non-empty list of strings, the empty string and duplicates included", () => {
    expect(() => checkConstraint({ type: "choice", choices: ["yes", "no", "", "naïve ☃", 'a"b\\c\n', "yes"] })).not.toThrow();
  });

  it("refuses an empty list, non-strings, NULs and lone surrogates", () => {
    expect(refusal({ type: "choice", choices: [] })).toMatchObject({ path: "", keyword: "choices" });
    expect(refusal({ type: "choice", choices: "yes" as unknown as string[] })).toMatchObject({ path: "", keyword: "choices" });
    const e = refusal({ type: "choice", choices: ["a", "b", 3 as unknown as string] });
    expect(e).toMatchObject({ path: "/2", keyword: "choices" });
    expect(e.message).toMatch(/choice 2 is not a string/);
    expect(refusal({ type: "choice", choices: ["a\u0000"] }).message).toMatch(/NUL/);
    expect(refusal({ type: "choice", choices: ["\udc00"] }).message).toMatch(/surrogate/);
  });
});

describe("structural_tag", () => {
  const accepted: Array<[string, unknown]> = [
    ["triggered tool calls", { type: "triggered_tags", triggers: ["<tool_call>"], tags: [call("f"), call("g", true)], stop_after_first: false }],
    ["tags without a type", { type: "triggered_tags", triggers: ["<a"], tags: [{ begin: "<a>", content: { type: "any_text" }, end: "</a>" }] }],
    ["forced calls", { type: "tags_with_separator", tags: [call("f")], separator: "\n", at_least_one: true, stop_after_first: true }],
    [
      "array of calls in a block",
      { type: "tag", begin: "[", content: { type: "tags_with_separator", tags: [call("f")], separator: ", ", at_least_one: true }, end: "]" },
    ],
    [
      "sequence ending unlimited",
      { type: "sequence", elements: [{ type: "const_string", value: "Answer: " }, { type: "regex", pattern: "[0-9]+" }, { type: "any_text" }] },
    ],
    ["or of limited", { type: "or", elements: [{ type: "const_string", value: "a" }, schema({ type: "integer" })] }],
    ["or of unlimited", { type: "or", elements: [{ type: "any_text" }, { type: "triggered_tags", triggers: ["<"], tags: [call("f")] }] }],
    ["empty begin and end around a limited content", { type: "tag", begin: "", content: schema(true), end: "" }],
    ["a GBNF grammar", { type: "tag", begin: "<a>", content: { type: "grammar", grammar: 'root ::= "x"+' }, end: "</a>" }],
  ];
  for (const [name, format] of accepted) it(`accepts ${name}`, () => expect(() => checkConstraint(tagged(format))).not.toThrow());

  const refused: Array<[string, unknown, string, string | undefined, RegExp]> = [
    ["not JSON", "{", "", undefined, /not valid JSON/],
    ["a non-object", [1], "", undefined, /must be an object/],
    ["the wrapper", { type: "structural_tag", format: { type: "any_text" } }, "/type", "type", /the format itself/],
    ["an unknown type", { type: "json" }, "/type", "type", /unknown format type "json"/],
    ["a missing type", { value: "x" }, "/type", "type", /must be one of/],
    ["a bad grammar", { type: "grammar", grammar: "root ::= foo" }, "/grammar", "grammar", /line 1, column 10: rule "foo" is used but never defined/],
    ["qwen_xml_parameter", { type: "qwen_xml_parameter", json_schema: {} }, "/type", "type", /not supported/],
    ["an unknown field", { type: "const_string", value: "x", extra: 1 }, "/extra", "extra", /unknown field/],
    ["any_text with a field", { type: "any_text", max_tokens: 4 }, "/max_tokens", "max_tokens", /unknown field/],
    ["a missing field", { type: "tag", begin: "<a>", content: { type: "any_text" } }, "/end", "end", /needs "end"/],
    ["an empty const_string", { type: "const_string", value: "" }, "/value", "value", /must not be empty/],
    ["a NUL in a string", { type: "const_string", value: "a\u0000" }, "/value", "value", /NUL/],
    ["a bad regex", { type: "sequence", elements: [{ type: "regex", pattern: "(?=a)" }] }, "/elements/0/pattern", "pattern", /lookahead/],
    ["empty elements", { type: "or", elements: [] }, "/elements", "elements", /non-empty array/],
    [
      "unlimited before the end of a sequence",
      { type: "sequence", elements: [{ type: "any_text" }, { type: "const_string", value: "x" }] },
      "/elements/0",
      "elements",
      /only the last element/,
    ],
    [
      "a mixed or",
      { type: "or", elements: [{ type: "any_text" }, { type: "const_string", value: "x" }] },
      "/elements",
      "elements",
      /all unlimited or all limited/,
    ],
    [
      "unlimited content with an empty end",
      { type: "tag", begin: "<a>", content: { type: "any_text" }, end: "" },
      "/end",
      "end",
      /must not be empty when the content is unlimited/,
    ],
    ["no triggers", { type: "triggered_tags", triggers: [], tags: [call("f")] }, "/triggers", "triggers", /non-empty array/],
    ["an empty trigger", { type: "triggered_tags", triggers: [""], tags: [call("f")] }, "/triggers/0", "triggers", /non-empty strings/],
    [
      "a tag no trigger starts",
      { type: "triggered_tags", triggers: ["<tool_call>"], tags: [call("f"), { ...call("g"), begin: "[g]" }] },
      "/tags/1/begin",
      "begin",
      /none of the triggers/,
    ],
    [
      "a tag two triggers start",
      { type: "triggered_tags", triggers: ["<tool", "<tool_call>"], tags: [call("f")] },
      "/tags/0/begin",
      "begin",
      /more than one trigger/,
    ],
    [
      "a trigger no tag uses",
      { type: "triggered_tags", triggers: ["<tool_call>", "<x>"], tags: [call("f")] },
      "/triggers/1",
      "triggers",
      /no tag begins with "<x>"/,
    ],
    ["a non-tag among tags", { type: "tags_with_separator", tags: [{ type: "const_string", value: "x" }], separator: "," }, "/tags/0/type", "type", /are tags/],
    ["an empty separator", { type: "tags_with_separator", tags: [call("f")], separator: "" }, "/separator", "separator", /must not be empty/],
    [
      "a non-boolean flag",
      { type: "triggered_tags", triggers: ["<tool_call>"], tags: [call("f")], at_least_one: "yes" },
      "/at_least_one",
      "at_least_one",
      /boolean/,
    ],
    ["a false schema", schema(false), "/json_schema", "json_schema", /an object, or true/],
    [
      "a schema keyword the engine ignores, deep inside",
      {
        type: "triggered_tags",
        triggers: ["<tool_call>"],
        tags: [call("f"), call("g", { type: "object", properties: { x: { type: "string", format: "color" } } })],
      },
      "/tags/1/content/json_schema/properties/x/format",
      "format",
      /format "color" is not enforced/,
    ],
    [
      "an unresolvable $ref",
      { type: "tag", begin: "<a>", content: schema({ $ref: "#/$defs/Nope" }), end: "</a>" },
      "/content/json_schema/$ref",
      "$ref",
      /does not resolve/,
    ],
  ];
  for (const [name, format, path, keyword, why] of refused) {
    it(`refuses ${name}`, () => {
      const e = refusal({ type: "structural_tag", format: typeof format === "string" ? format : JSON.stringify(format) });
      expect(e.message).toMatch(why);
      expect(e.path).toBe(path);
      expect(e.keyword).toBe(keyword);
    });
  }

  it("refuses formats nested too deep", () => {
    let f: unknown = { type: "const_string", value: "x" };
    for (let i = 0; i < 40; i++) f = { type: "sequence", elements: [f] };
    expect(refusal(tagged(f)).message).toMatch(/nest deeper/);
  });
});

describe("other constraint types", () => {
  it("json_object passes; json_schema goes through checkJsonSchema; unknown types are refused", () => {
    expect(() => checkConstraint({ type: "json_object" })).not.toThrow();
    expect(refusal({ type: "json_schema", schema: "{" }).message).toMatch(/not valid JSON/);
    expect(refusal({ type: "json_schema", schema: JSON.stringify({ type: "object", not: {} }) })).toMatchObject({ path: "/not", keyword: "not" });
    expect(refusal({ type: "ebnf" } as unknown as ConstraintSpec)).toMatchObject({ keyword: "type" });
  });
});
