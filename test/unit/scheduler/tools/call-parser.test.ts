import { describe, expect, it } from "vitest";
import { CallParser } from "../../../../src/scheduler/tools/call-parser.js";
import type { CallSyntax } from "../../../../src/scheduler/tools/call-syntax.js";
import { hermes } from "../../../../src/scheduler/tools/hermes.js";
import { llama3 } from "../../../../src/scheduler/tools/llama3.js";
import { mistral } from "../../../../src/scheduler/tools/mistral.js";
import { smollm2 } from "../../../../src/scheduler/tools/smollm2.js";
import type { ToolOutputPiece } from "../../../../src/scheduler/tools/types.js";

interface Parsed {
  content: string;
  calls: Array<{ id: string; name: string; arguments: string }>;
}

function ids(): () => string {
  let n = 0;
  return () => `call_${n++}`;
}

function collect(pieces: ToolOutputPiece[]): Parsed {
  const out: Parsed = { content: "", calls: [] };
  for (const p of pieces) {
    if (p.type === "content") out.content += p.text;
    else if (p.type === "call-start") {
      expect(p.index).toBe(out.calls.length);
      out.calls.push({ id: p.id, name: p.name, arguments: "" });
    } else {
      expect(p.index).toBe(out.calls.length - 1);
      out.calls[p.index].arguments += p.text;
    }
  }
  return out;
}

function parseWhole(syntax: CallSyntax, text: string): Parsed {
  const parser = new CallParser(syntax, ids());
  return collect([...parser.push(text), ...parser.finish()]);
}

/** Parses `text` fed in pieces cut at `cuts`, checking that nothing is emitted twice or out of order. */
function parseCut(syntax: CallSyntax, text: string, cuts: number[]): Parsed {
  const parser = new CallParser(syntax, ids());
  const pieces: ToolOutputPiece[] = [];
  let from = 0;
  for (const cut of [...cuts, text.length]) {
    pieces.push(...parser.push(text.slice(from, cut)));
    from = cut;
  }
  pieces.push(...parser.finish());
  return collect(pieces);
}

/** Every way of cutting the text in two, and one character at a time, parses like the whole. */
function expectStreamingAgrees(syntax: CallSyntax, text: string): Parsed {
  const whole = parseWhole(syntax, text);
  for (let cut = 0; cut <= text.length; cut++) expect(parseCut(syntax, text, [cut]), `cut at ${cut}`).toEqual(whole);
  expect(
    parseCut(
      syntax,
      text,
      [...text].map((_, i) => i),
    ),
  ).toEqual(whole);
  return whole;
}

describe("CallParser, Hermes syntax", () => {
  it("reads calls in <tool_call> tags, arguments exactly as written", () => {
    const text = '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris","days":[1,2]}}\n</tool_call>';
    expect(expectStreamingAgrees(hermes.syntax, text)).toEqual({
      content: "",
      calls: [{ id: "call_0", name: "get_weather", arguments: '{"city":"Paris","days":[1,2]}' }],
    });
  });

  it("keeps prose before a call as content and reads several calls", () => {
    const text =
      'Let me check. <tool_call>\n{"name": "a", "arguments": {"s":"x}y\\"z{"}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>';
    const parsed = expectStreamingAgrees(hermes.syntax, text);
    expect(parsed.content).toBe("Let me check.");
    expect(parsed.calls.map((c) => [c.name, c.arguments])).toEqual([
      ["a", '{"s":"x}y\\"z{"}'],
      ["b", "{}"],
    ]);
  });

  it("is plain text without the tag: a call-like object in prose is not a call", () => {
    const text = 'You could call {"name": "get_weather", "arguments": {"city": "Paris"}} yourself.';
    expect(expectStreamingAgrees(hermes.syntax, text)).toEqual({ content: text, calls: [] });
  });

  it("gives back an unfinished opener as text at the end", () => {
    expect(expectStreamingAgrees(hermes.syntax, "Hello <tool_")).toEqual({ content: "Hello <tool_", calls: [] });
  });

  it("never gives back a call block cut inside a call's head as text: a call once its name is whole, else nothing", () => {
    expect(expectStreamingAgrees(hermes.syntax, 'Hi <tool_call>\n{"na')).toEqual({ content: "Hi", calls: [] });
    expect(expectStreamingAgrees(hermes.syntax, "<tool_call>\n")).toEqual({ content: "", calls: [] });
    expect(expectStreamingAgrees(hermes.syntax, '<tool_call>\n{"name": "get_weather", "argu')).toEqual({
      content: "",
      calls: [{ id: "call_0", name: "get_weather", arguments: "" }],
    });
    expect(expectStreamingAgrees(smollm2.syntax, '<tool_call>[{"name":')).toEqual({ content: "", calls: [] });
    expect(expectStreamingAgrees(smollm2.syntax, '<tool_call>[{"name": "f", "arguments": {"x": 1}}, {"name": "f"')).toEqual({
      content: "",
      calls: [
        { id: "call_0", name: "f", arguments: '{"x": 1}' },
        { id: "call_1", name: "f", arguments: "" },
      ],
    });
    expect(expectStreamingAgrees(llama3.syntax, '{"name": "f", "param')).toEqual({ content: "", calls: [{ id: "call_0", name: "f", arguments: "" }] });
  });

  it("reads the calls before a repeated call that was left out (the block left open)", () => {
    expect(expectStreamingAgrees(smollm2.syntax, '<tool_call>[{"name": "f", "arguments": {"x": 1}}, ')).toEqual({
      content: "",
      calls: [{ id: "call_0", name: "f", arguments: '{"x": 1}' }],
    });
    expect(expectStreamingAgrees(hermes.syntax, '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n')).toEqual({
      content: "",
      calls: [{ id: "call_0", name: "f", arguments: "{}" }],
    });
  });

  it("keeps a call cut short by the token budget, with the arguments written so far", () => {
    const parsed = expectStreamingAgrees(hermes.syntax, '<tool_call>\n{"name": "f", "arguments": {"a": [1, 2');
    expect(parsed.calls).toEqual([{ id: "call_0", name: "f", arguments: '{"a": [1, 2' }]);
  });

  it("keeps white space of an answer without calls", () => {
    expect(expectStreamingAgrees(hermes.syntax, "  two words \n")).toEqual({ content: "  two words \n", calls: [] });
  });
});

describe("CallParser, array syntaxes", () => {
  it("reads SmolLM2's array of calls", () => {
    const text = '<tool_call>[{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {"y": "]"}}]</tool_call>';
    const parsed = expectStreamingAgrees(smollm2.syntax, text);
    expect(parsed).toEqual({
      content: "",
      calls: [
        { id: "call_0", name: "f", arguments: '{"x": 1}' },
        { id: "call_1", name: "g", arguments: '{"y": "]"}' },
      ],
    });
  });

  it("reads Mistral's [TOOL_CALLS] array", () => {
    const parsed = expectStreamingAgrees(mistral.syntax, '[TOOL_CALLS][{"name": "f", "arguments": {}}]');
    expect(parsed.calls.map((c) => c.name)).toEqual(["f"]);
  });
});

describe("CallParser, Llama 3 syntax", () => {
  it("reads an answer that is a call", () => {
    const parsed = expectStreamingAgrees(llama3.syntax, ' {"name": "f", "parameters": {"q": "a b"}}');
    expect(parsed).toEqual({ content: "", calls: [{ id: "call_0", name: "f", arguments: '{"q": "a b"}' }] });
  });

  it("treats an answer that starts with prose as prose, call-like text included", () => {
    const text = 'Sure: {"name": "f", "parameters": {}}';
    expect(expectStreamingAgrees(llama3.syntax, text)).toEqual({ content: text, calls: [] });
  });

  it("treats JSON that is not a call as content", () => {
    const text = '{"answer": 42}';
    expect(expectStreamingAgrees(llama3.syntax, text)).toEqual({ content: text, calls: [] });
  });
});
