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
});
