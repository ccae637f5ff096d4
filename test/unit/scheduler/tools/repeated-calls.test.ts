import { describe, expect, it } from "vitest";
import { CallTexts } from "../../../../src/scheduler/tools/repeated-calls.js";

describe("CallTexts", () => {
  it("gives each call's whole text once it is complete, however the text is cut into pieces", () => {
    const text = 'Sure <tool_call>[{"name": "f", "arguments": {"s": "}{\\"", "a": [1, {"b": 2}]}}, {"name": "g", "arguments": {}}]</tool_call>';
    const expected = ['{"name": "f", "arguments": {"s": "}{\\"", "a": [1, {"b": 2}]}}', '{"name": "g", "arguments": {}}'];
    for (const size of [1, 2, 3, 7, text.length]) {
      const calls = new CallTexts();
      const got: string[] = [];
      for (let i = 0; i < text.length; i += size) got.push(...calls.push(text.slice(i, i + size)));
      expect(got, `pieces of ${size}`).toEqual(expected);
    }
  });

  it("finds nothing in text without a call head", () => {
    const calls = new CallTexts();
    expect(calls.push('{"nam')).toEqual([]);
    expect(calls.push('e_x": 1} {"a": {"name": 1}}')).toEqual([]);
  });
});
