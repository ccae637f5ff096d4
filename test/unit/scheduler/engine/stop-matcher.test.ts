import { describe, expect, it } from "vitest";
import { StopMatcher } from "../../../../src/scheduler/engine/stop-matcher.js";

function feed(stops: string[], pieces: string[]) {
  const m = new StopMatcher(stops);
  const out: string[] = [];
  let stopped = false;
  for (const p of pieces) {
    const r = m.push(p);
    out.push(r.text);
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) out.push(m.flush());
  return { out, text: out.join(""), stopped };
}

describe("StopMatcher", () => {
  it("passes text through when there are no stop strings", () => {
    expect(feed([], ["a", "b", "c"])).toEqual({ out: ["a", "b", "c", ""], text: "abc", stopped: false });
  });

  it("holds back a possible stop-string start across pieces and drops the stop text", () => {
    const r = feed(["END"], ["Hello E", "N", "D and more"]);
    expect(r.out).toEqual(["Hello ", "", ""]);
    expect(r.stopped).toBe(true);
  });

  it("releases held text when the stop string does not follow", () => {
    const r = feed(["END"], ["Hello E", "N", "o"]);
    expect(r.out).toEqual(["Hello ", "", "ENo", ""]);
    expect(r.stopped).toBe(false);
  });

  it("releases held text at the end of the stream", () => {
    expect(feed(["END"], ["the EN"])).toEqual({ out: ["the ", "EN"], text: "the EN", stopped: false });
  });

  it("ends at the earliest of several stop strings, even inside one piece", () => {
    expect(feed(["\n\n", "x"], ["ab\n\ncdx"]).text).toBe("ab");
    expect(feed(["cd", "b"], ["abcd"]).text).toBe("a");
  });

  it("keeps the longest partial match when one stop's prefix contains another's", () => {
    const r = feed(["aab"], ["xa", "a", "a", "b", "tail"]);
    expect(r.text).toBe("xa");
    expect(r.stopped).toBe(true);
  });

  it("with keep, releases the longest stop string matched at the first place with the text before it", () => {
    const m = new StopMatcher(["b", "ab", "abc"], true);
    expect(m.push("xa")).toEqual({ text: "x", stopped: false });
    expect(m.push("bcd")).toEqual({ text: "abc", stopped: true });
  });

  it("ignores empty stop strings and handles unicode", () => {
    expect(feed(["", "🍌"], ["I like ", "🍌 a lot"]).text).toBe("I like ");
  });

  it("counts the released characters", () => {
    const m = new StopMatcher(["##"]);
    m.push("ab#");
    expect(m.emitted).toBe(2);
    m.push("c");
    expect(m.emitted).toBe(4);
  });

  describe("a minimum indentation", () => {
    it("ends after the indentation of the first line after a break indented less, holding each line until its indentation shows", () => {
      const m = new StopMatcher([], false, 4);
      expect(m.push("if (x) {\n")).toEqual({ text: "if (x) {\n", stopped: false });
      expect(m.push("  ")).toEqual({ text: "", stopped: false });
      expect(m.push("  y();\n")).toEqual({ text: "    y();\n", stopped: false });
      expect(m.push("  }\nmore")).toEqual({ text: "  ", stopped: true });
      expect(m.dedented).toBe(true);
      expect(m.matched).toBeNull();
    });

    it("never checks the first line; an empty line counts as indented by nothing; tabs count as spaces do", () => {
      expect(new StopMatcher([], false, 2).push("x = 1")).toEqual({ text: "x = 1", stopped: false });
      expect(new StopMatcher([], false, 2).push("a\n\n  b")).toEqual({ text: "a\n", stopped: true });
      expect(new StopMatcher([], false, 2).push("a\n\t\tb\n")).toEqual({ text: "a\n\t\tb\n", stopped: false });
    });

    it("goes with stop strings: whichever comes first ends the stream", () => {
      const early = new StopMatcher(["END"], false, 2);
      expect(early.push("aEND\nb")).toEqual({ text: "a", stopped: true });
      expect([early.matched, early.dedented]).toEqual(["END", false]);
      const late = new StopMatcher(["END"], false, 2);
      expect(late.push("a\nbEND")).toEqual({ text: "a\n", stopped: true });
      expect([late.matched, late.dedented]).toEqual([null, true]);
    });

    it("releases an unfinished line of spaces at the end", () => {
      const m = new StopMatcher([], false, 4);
      expect(m.push("a\n  ")).toEqual({ text: "a\n", stopped: false });
      expect(m.flush()).toBe("  ");
    });
  });
});
