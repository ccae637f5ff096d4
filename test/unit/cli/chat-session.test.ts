import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { chatSession, fitTurns, PROMPT } from "../../../src/cli/chat-session.js";
import type { ChatMessage } from "../../../src/scheduler/index.js";

/** A session fed `lines`, whose model answers "answer N" and records what it was asked; `fits` allows at most `maxMessages` messages. */
async function session(lines: string[], options: { system?: string; maxMessages?: number } = {}) {
  const input = new PassThrough();
  let output = "";
  let notes = "";
  const asked: ChatMessage[][] = [];
  const done = chatSession({
    input,
    output: { write: (t: string) => (output += t) },
    notes: { write: (t: string) => (notes += t) },
    system: options.system,
    fits: (messages) => messages.length <= (options.maxMessages ?? Infinity) && messages.every((m) => String(m.content).length < 100),
    reply: async (messages, signal, write) => {
      asked.push([...messages]);
      write(`answer ${asked.length}`);
      return `answer ${asked.length}`;
    },
  });
  for (const line of lines) input.write(`${line}\n`);
  input.end();
  await done;
  return { output, notes, asked };
}

describe("chatSession", () => {
  it("sends each line with the conversation so far, and streams the answers", async () => {
    const { output, asked } = await session(["hello", "again"], { system: "be brief" });
    expect(asked).toEqual([
      [
        { role: "system", content: "be brief" },
        { role: "user", content: "hello" },
      ],
      [
        { role: "system", content: "be brief" },
        { role: "user", content: "hello" },
        { role: "assistant", content: "answer 1" },
        { role: "user", content: "again" },
      ],
    ]);
    expect(output).toBe(`${PROMPT}answer 1\n\n${PROMPT}answer 2\n\n${PROMPT}\n`);
  });

  it("forgets the conversation at /clear, keeps the system message, and ends at /bye", async () => {
    const { asked, notes } = await session(["one", "/clear", "two", "/bye", "never sent"], { system: "s" });
    expect(asked.at(-1)).toEqual([
      { role: "system", content: "s" },
      { role: "user", content: "two" },
    ]);
    expect(asked).toHaveLength(2);
    expect(notes).toContain("forgotten");
  });

  it("skips empty lines and answers /? with help, not the model", async () => {
    const { asked, output } = await session(["", "   ", "/?"]);
    expect(asked).toHaveLength(0);
    expect(output).toContain("/clear");
  });

  it("takes a message of several lines between triple quotes", async () => {
    const { asked } = await session(['"""first line', "second line", 'third"""', '"""one line"""']);
    expect(asked[0].at(-1)).toEqual({ role: "user", content: "first line\nsecond line\nthird" });
    expect(asked[1].at(-1)).toEqual({ role: "user", content: "one line" });
  });

  it("forgets the oldest exchanges when the conversation no longer fits, and sends nothing that cannot", async () => {
    const { asked, notes } = await session(["a", "b", "c", "x".repeat(150), "d"], { maxMessages: 4 });
    expect(asked[2]).toEqual([
      { role: "user", content: "b" },
      { role: "assistant", content: "answer 2" },
      { role: "user", content: "c" },
    ]);
    expect(asked).toHaveLength(4); // the long line was not sent
    expect(notes).toContain("too long");
    expect(notes).toContain("the oldest 2 messages are forgotten");
  });
});

describe("fitTurns", () => {
  const user = (content: string): ChatMessage => ({ role: "user", content });
  const assistant = (content: string): ChatMessage => ({ role: "assistant", content });
  it("keeps the latest turns that fit, starting at a user turn", () => {
    const turns = [user("1"), assistant("a"), user("2"), assistant("b"), user("3")];
    expect(fitTurns([], turns, (m) => m.length <= 5)).toEqual(turns);
    expect(fitTurns([], turns, (m) => m.length <= 4)).toEqual(turns.slice(2));
    expect(fitTurns([], turns, (m) => m.length <= 2)).toEqual(turns.slice(4));
    expect(fitTurns([], turns, () => false)).toBeNull();
  });
});
