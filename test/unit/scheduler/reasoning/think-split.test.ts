import { describe, expect, it } from "vitest";
import { reasoningPart, splitThinking, ThinkSplitter, type ReasoningPiece } from "../../../../src/scheduler/reasoning/index.js";

/** The pieces of `text` fed in pieces of `size` characters, merged by type as a client would concatenate them. */
function streamed(text: string, opened: boolean, size: number): { reasoning: string | null; content: string; pieces: ReasoningPiece[] } {
  const splitter = new ThinkSplitter(opened);
  const pieces: ReasoningPiece[] = [];
  for (let at = 0; at < text.length; at += size) pieces.push(...splitter.push(text.slice(at, at + size)));
  pieces.push(...splitter.finish());
  let reasoning: string | null = null;
  let content = "";
  for (const p of pieces) {
    expect(p.text).not.toBe("");
    if (p.type === "reasoning") reasoning = (reasoning ?? "") + p.text;
    else content += p.text;
  }
  return { reasoning, content, pieces };
}

const CASES: Array<{ name: string; text: string; opened: boolean; reasoning: string | null; content: string }> = [
  {
    name: "thinking, then the answer",
    text: "<think>\nWhat is 2+2? 4.\n</think>\n\nIt is 4.",
    opened: false,
    reasoning: "\nWhat is 2+2? 4.\n",
    content: "It is 4.",
  },
  { name: "white space before the opening tag", text: "\n <think>hm</think>ok", opened: false, reasoning: "hm", content: "ok" },
  { name: "no thinking", text: "Just an answer with </think> inside.", opened: false, reasoning: null, content: "Just an answer with </think> inside." },
  {
    name: "a tag later in the answer is content",
    text: "Answer. <think>not reasoning</think>",
    opened: false,
    reasoning: null,
    content: "Answer. <think>not reasoning</think>",
  },
  { name: "the prompt opened the reasoning", text: "Let me see.\n</think>\n\nYes.", opened: true, reasoning: "Let me see.\n", content: "Yes." },
  { name: "reasoning cut off by the token budget", text: "Still thinking about </thi", opened: true, reasoning: "Still thinking about </thi", content: "" },
  { name: "an empty reasoning", text: "<think>\n\n</think>\n\nHi", opened: false, reasoning: "\n\n", content: "Hi" },
  { name: "a second closing tag is content", text: "a</think>b</think>c", opened: true, reasoning: "a", content: "b</think>c" },
  { name: "an answer that is only a tag's start", text: "<thi", opened: false, reasoning: null, content: "<thi" },
  { name: "only white space", text: "  \n", opened: false, reasoning: null, content: "  \n" },
  // The line breaks after the thinking are dropped, not an answer's own leading blank (a choice " yes").
  { name: "an answer starting with a blank", text: "hm</think>\r\n\n yes", opened: true, reasoning: "hm", content: " yes" },
];

describe("ThinkSplitter", () => {
  for (const c of CASES) {
    it(`${c.name}: whole and streamed in every piece size agree`, () => {
      expect(splitThinking(c.text, c.opened)).toEqual({ reasoning: c.reasoning, content: c.content });
      for (let size = 1; size <= c.text.length; size++) {
        const s = streamed(c.text, c.opened, size);
        expect({ reasoning: s.reasoning, content: s.content }, `pieces of ${size}`).toEqual({ reasoning: c.reasoning, content: c.content });
      }
    });
  }

  it("releases reasoning as it comes, holding back only what may start the closing tag", () => {
    const splitter = new ThinkSplitter(true);
    expect(splitter.push("abc</")).toEqual([{ type: "reasoning", text: "abc" }]);
    expect(splitter.push("th")).toEqual([]);
    expect(splitter.push("ink>")).toEqual([]);
    expect(splitter.push("\n\nX")).toEqual([{ type: "content", text: "X" }]);
  });

  it("holds the answer's start until it cannot be an opening tag", () => {
    const splitter = new ThinkSplitter(false);
    expect(splitter.push(" <th")).toEqual([]);
    expect(splitter.push("e")).toEqual([{ type: "content", text: " <the" }]);
  });
});

describe("reasoningPart: the reasoning as written, tags included", () => {
  it("up to the closing tag, the whole text when it never closes, nothing without reasoning", () => {
    expect(reasoningPart("<think>a</think>b", false)).toBe("<think>a</think>");
    expect(reasoningPart("a</think>b", true)).toBe("a</think>");
    expect(reasoningPart("abc", true)).toBe("abc");
    expect(reasoningPart("abc</think>", false)).toBe("");
  });
});
