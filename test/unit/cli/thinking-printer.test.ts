import { describe, expect, it } from "vitest";
import { THINKING_END, THINKING_START, ThinkingPrinter } from "../../../src/cli/thinking-printer.js";

/** What each stream gets when `text` arrives in pieces of `size` characters. */
function printed(text: string, opened: boolean, size: number, hide = false): { thinking: string; answer: string } {
  let thinking = "";
  let answer = "";
  const printer = new ThinkingPrinter(opened, hide ? null : { write: (t: string) => (thinking += t) });
  for (let at = 0; at < text.length; at += size) printer.push(text.slice(at, at + size), (t) => (answer += t));
  printer.finish((t) => (answer += t));
  return { thinking, answer };
}

describe("ThinkingPrinter", () => {
  it("the thinking between its markers on one stream, the answer alone on the other, in any piece size", () => {
    for (let size = 1; size <= 12; size++) {
      expect(printed("<think>\nHm, a greeting.\n</think>\n\nHello!", false, size)).toEqual({
        thinking: `${THINKING_START}Hm, a greeting.\n${THINKING_END}`,
        answer: "Hello!",
      });
      expect(printed("Simple.\n</think>\n\nHi.", true, size)).toEqual({ thinking: `${THINKING_START}Simple.\n${THINKING_END}`, answer: "Hi." });
    }
  });

  it("an answer without thinking prints no markers; thinking cut short still closes them; --hide-thinking prints none", () => {
    expect(printed("Hello!", false, 3)).toEqual({ thinking: "", answer: "Hello!" });
    expect(printed("still thinking", true, 3)).toEqual({ thinking: `${THINKING_START}still thinking${THINKING_END}`, answer: "" });
    expect(printed("<think>x</think>y", false, 2, true)).toEqual({ thinking: "", answer: "y" });
  });
});
