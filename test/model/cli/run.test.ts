/**
 * `kiln run` as a person uses it: a prompt piped on stdin, and a conversation at a real terminal
 * (a pseudo-terminal, test/support/terminal.py), whose every answer must be what the HTTP API
 * answers the same turns (greedy, so the same tokens), with `/clear`, a message of several lines,
 * Ctrl-C stopping an answer, and Ctrl-D ending the session; and a speech model's transcript of a
 * file, which must be the API's.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { basename, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KILN_BIN, startServer, stopServer, type RunningServer } from "../../support/server.js";
import { speechFixture } from "../../support/speech.js";

const MODEL = "smollm2-135m-instruct";
const SPEECH = "whisper-tiny-en";
const PROMPT = ">>> ";

/** `kiln run <args>` with `stdin` piped in: its exit code and output. */
function kilnRun(args: string[], stdin: string | Uint8Array): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = execFile(process.execPath, [KILN_BIN, "run", ...args], { timeout: 120_000 }, (error, stdout, stderr) =>
      done({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end(stdin);
  });
}

interface Step {
  /** Text to wait for in the terminal's output. */
  wait: string;
  /** Keys to type then ("\r" is Enter, "\x03" Ctrl-C, "\x04" Ctrl-D). */
  send: string;
  /** Seconds to wait before typing. */
  delay?: number;
}

/** `kiln run <args>` at a pseudo-terminal, the steps typed into it: everything it showed (escape sequences and carriage returns removed) and its exit. */
function atTerminal(args: string[], steps: Step[], timeoutSeconds = 60): Promise<{ output: string; exit: number | null; timedOut: boolean }> {
  const spec = JSON.stringify({ argv: [process.execPath, KILN_BIN, "run", ...args], steps, timeout: timeoutSeconds });
  return new Promise((done, fail) => {
    execFile("python3", [resolve("test/support/terminal.py"), spec], { maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (error) return fail(new Error(`terminal.py failed: ${stderr}`));
      const result = JSON.parse(stdout) as { output: string; exit: number | null; timed_out: boolean };
      // eslint-disable-next-line no-control-regex
      const output = result.output.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "").replace(/\r/g, "");
      done({ output, exit: result.exit, timedOut: result.timed_out });
    });
  });
}

/** The answers in a conversation's output: after each prompt, what follows the typed lines (the first, and those after "... " prompts). */
function answersIn(output: string): string[] {
  return output
    .split(PROMPT)
    .slice(1)
    .map((turn) => turn.split("\n"))
    .filter((lines) => lines.length > 1 && !lines[0].startsWith("/") && lines[0] !== "")
    .map((lines) => {
      let at = 1;
      while (at < lines.length && lines[at].startsWith("... ")) at++;
      return lines.slice(at).join("\n").trim();
    });
}

let server: RunningServer;
beforeAll(async () => {
  server = await startServer(MODEL, ["--max-running", "1", "--model", SPEECH]);
}, 300_000);
afterAll(async () => {
  await stopServer(server);
});

/** The API's greedy answer to these messages, as `kiln run` is asked for it, and the prompt tokens it found cached. */
async function apiReply(messages: { role: string; content: string }[], maxTokens: number, on = server): Promise<{ content: string; cached: number }> {
  const res = await fetch(`${on.baseURL}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages, max_tokens: maxTokens, temperature: 0 }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens_details: { cached_tokens: number } } };
  return { content: body.choices[0].message.content, cached: body.usage.prompt_tokens_details.cached_tokens };
}

/** The API's greedy answer to these messages, as `kiln run` is asked for it. */
async function apiAnswer(messages: { role: string; content: string }[], maxTokens: number, on = server): Promise<string> {
  return (await apiReply(messages, maxTokens, on)).content;
}

describe("kiln run", () => {
  it("answers a prompt on stdin as it answers the same words given as arguments", async () => {
    const args = [MODEL, "--temperature", "0", "--max-tokens", "12"];
    const piped = await kilnRun(args, "Name three primary colors.\n");
    const given = await kilnRun([...args, "Name three primary colors."], "");
    expect(piped.code, piped.stderr).toBe(0);
    expect(piped.stdout.trim().length).toBeGreaterThan(0);
    expect(piped.stdout).toBe(given.stdout);
    const empty = await kilnRun([MODEL], "  \n");
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/^kiln run: needs a prompt/);
    const formatted = await kilnRun([MODEL, "--format", "srt", "hi"], "");
    expect(formatted.code).toBe(2);
    expect(formatted.stderr).toMatch(/^kiln run: --format is for a speech model/);
  }, 240_000);

  it("--verbose counts the prompt's and the answer's tokens as the API's usage does, with their speed", async () => {
    const question = "Name three primary colors.";
    const run = await kilnRun([MODEL, "--verbose", "--temperature", "0", "--max-tokens", "12", question], "");
    expect(run.code, run.stderr).toBe(0);
    const res = await fetch(`${server.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: question }], max_tokens: 12, temperature: 0 }),
    });
    const usage = ((await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    expect(run.stderr).toMatch(
      new RegExp(`^prompt: ${usage.prompt_tokens} tokens \\(0 cached\\), first token after \\d+\\.\\d{3} s, \\d+\\.\\d tokens/s$`, "m"),
    );
    expect(run.stderr).toMatch(new RegExp(`^answer: ${usage.completion_tokens} tokens in \\d+\\.\\d{3} s, \\d+\\.\\d tokens/s \\((length|stop)\\)$`, "m"));
  }, 240_000);

  // A conversation reuses each turn's cache whole, answer included, which a fresh prefill of the same
  // tokens matches only to rounding: its answers are those of a server that reuses the same way,
  // asked the same turns in the same order from a fresh start.
  it("holds a conversation at a terminal: each answer is the API's to the turns so far, the last turn's cache reused", async () => {
    const maxTokens = 16;
    const session = await atTerminal(
      [MODEL, "--temperature", "0", "--max-tokens", String(maxTokens)],
      [
        { wait: PROMPT, send: "Name a fruit.\r" },
        { wait: PROMPT, send: '"""\r' },
        { wait: "... ", send: "What colour\r" },
        { wait: "... ", send: "is it?\r" },
        { wait: "... ", send: '"""\r' },
        { wait: PROMPT, send: "/clear\r" },
        { wait: PROMPT, send: "What colour is it?\r" },
        { wait: PROMPT, send: "\x04" },
      ],
    );
    expect(session.timedOut, session.output).toBe(false);
    expect(session.exit, session.output).toBe(0);
    const answers = answersIn(session.output);
    expect(answers, session.output).toHaveLength(3);
    const reusing = await startServer(MODEL, ["--max-running", "1", "--prefix-reuse", "any"]);
    try {
      const first = await apiReply([{ role: "user", content: "Name a fruit." }], maxTokens, reusing);
      const second = await apiReply(
        [
          { role: "user", content: "Name a fruit." },
          { role: "assistant", content: first.content },
          { role: "user", content: "What colour\nis it?" },
        ],
        maxTokens,
        reusing,
      );
      const afterClear = await apiAnswer([{ role: "user", content: "What colour is it?" }], maxTokens, reusing);
      expect(first.cached).toBe(0);
      // The first turn's prompt and answer, reused.
      expect(second.cached).toBeGreaterThan(20);
      expect(answers).toEqual([first.content.trim(), second.content.trim(), afterClear.trim()]);
    } finally {
      await stopServer(reusing);
    }
    expect(session.output).toContain("(the conversation is forgotten)");
  }, 240_000);

  it("stops an answer at Ctrl-C and goes on; Ctrl-C at the prompt says how to leave", async () => {
    const session = await atTerminal(
      [MODEL, "--temperature", "0", "--max-tokens", "3000"],
      [
        { wait: PROMPT, send: "Count from 1 to 3000, one number per line.\r" },
        // The greedy answer counts "1. 1", "2. 2"... to 20: Ctrl-C as it starts. A missed one lets it
        // end without "(stopped)", and the next step times out.
        { wait: "1. 1", send: "\x03" },
        { wait: "(stopped)", send: "" },
        { wait: PROMPT, send: "\x03" },
        { wait: "/bye to exit", send: "/bye\r" },
      ],
      30,
    );
    expect(session.timedOut, session.output).toBe(false);
    expect(session.exit, session.output).toBe(0);
    expect(answersIn(session.output)[0].length, session.output).toBeGreaterThan(0);
  }, 240_000);

  it("transcribes an audio file with a speech model, window by window or in a response_format, as the API does", async () => {
    const long = speechFixture("long");
    const short = speechFixture("lighthouse");
    for (const [path, viaStdin] of [
      [long.files.webm, false],
      [short.files.wav, true],
    ] as const) {
      const form = new FormData();
      form.append("model", SPEECH);
      form.append("file", new Blob([readFileSync(path)]), basename(path));
      const res = await fetch(`${server.baseURL}/audio/transcriptions`, { method: "POST", body: form });
      expect(res.status).toBe(200);
      const expected = ((await res.json()) as { text: string }).text;
      const run = viaStdin ? await kilnRun([SPEECH], readFileSync(path)) : await kilnRun([SPEECH, path], "");
      expect(run.code, run.stderr).toBe(0);
      const lines = run.stdout.trim().split("\n");
      if (path === long.files.webm) expect(lines.length).toBeGreaterThan(2); // a line a segment, over two windows
      const spaced = (text: string) => text.replace(/\s+/g, " ").trim();
      expect(spaced(lines.join(" "))).toBe(spaced(expected));
    }
    // The API's answers for a response_format, once the file is done: subtitles and the verbose JSON.
    for (const format of ["srt", "verbose_json"] as const) {
      const form = new FormData();
      form.append("model", SPEECH);
      form.append("response_format", format);
      form.append("file", new Blob([readFileSync(long.files.webm)]), "long.webm");
      const expected = await (await fetch(`${server.baseURL}/audio/transcriptions`, { method: "POST", body: form })).text();
      const run = await kilnRun([SPEECH, long.files.webm, "--format", format], "");
      expect(run.code, run.stderr).toBe(0);
      if (format === "srt") expect(run.stdout).toBe(expected);
      else expect(JSON.parse(run.stdout)).toEqual(JSON.parse(expected));
    }
    const missing = await kilnRun([SPEECH, "no-such-file.wav"], "");
    expect(missing).toMatchObject({ code: 1, stderr: "kiln run: no-such-file.wav: no such file\n" });
    const tooHot = await kilnRun([SPEECH, "--temperature", "1.5", short.files.wav], "");
    expect(tooHot.code).toBe(2);
    expect(tooHot.stderr).toMatch(/^kiln run: --temperature: a speech model takes 0 to 1/);
  }, 240_000);
});

describe("a reasoning model (SmolLM2 with a template that opens the reasoning, as DeepSeek-R1 distills' do)", () => {
  const TEMPLATE = resolve("test/fixtures/templates/served/chatml-think.jinja");
  const QUESTION = "What is 2+2?";

  it("prints the thinking on stderr between its markers, and the answer alone on stdout; --hide-thinking leaves the thinking out", async () => {
    const { Tokenizer } = await import("../../../src/runtime/text/index.js");
    const { readTokenizerSpec } = await import("../../../src/runtime/artifact/index.js");
    const { compiledArtifact } = await import("../../support/model.js");
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec((await compiledArtifact()).dir));
    const prompt = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>\n`, { parseSpecial: true });
    const res = await fetch(`${server.baseURL}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, prompt, max_tokens: 16, temperature: 0 }),
    });
    const raw = ((await res.json()) as { choices: Array<{ text: string }> }).choices[0].text;
    expect(raw).not.toContain("</think>");

    const shown = await kilnRun([MODEL, "--chat-template-file", TEMPLATE, "--temperature", "0", "--max-tokens", "16"], QUESTION);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toBe("\n");
    expect(shown.stderr).toContain(`Thinking...\n${raw.replace(/^\n/, "")}\n...done thinking.\n`);

    const hidden = await kilnRun([MODEL, "--chat-template-file", TEMPLATE, "--hide-thinking", "--temperature", "0", "--max-tokens", "16"], QUESTION);
    expect(hidden.stdout).toBe("\n");
    expect(hidden.stderr).not.toContain("Thinking...");
  }, 180_000);
});
