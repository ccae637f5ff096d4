/**
 * POST /v1/audio/transcriptions over the real app, the real multipart parser and the real audio
 * decoder (ffmpeg), with a fake speech model: every response format field by field, streaming,
 * limits and bad uploads, model kinds, client disconnects, metering and metrics, and the official
 * npm `openai` client against the real server.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp, type AppOptions } from "../../../src/api/app.js";
import { sqliteKeyStore } from "../cloud/keys-support.js";
import { MAX_FILE_BYTES } from "../../../src/api/routes/transcriptions.js";
import { UsageSpool } from "../../../src/cloud/usage-spool.js";
import { sqliteUsageRecorder } from "../../../src/cloud/usage.js";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { ModelRegistry, OverloadedError } from "../../../src/scheduler/index.js";
import { AUTH, fakeModel, SLUG, sseEvents } from "./fake-model.js";
import { fakeSpeechModel, SPEECH_SLUG, type FakeSpeechOptions } from "./fake-speech-model.js";

const FULL_TEXT = "Hello there, this is a test. And the second window ends here.";
const URL = "/v1/audio/transcriptions";

let dir: string;
let tone: Buffer;
let silence: Buffer;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "kiln-transcriptions-"));
  const ffmpeg = (args: string[], out: string) => {
    execFileSync("ffmpeg", ["-nostdin", "-hide_banner", "-loglevel", "error", "-y", ...args, join(dir, out)]);
    return readFileSync(join(dir, out));
  };
  tone = ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:duration=2", "-ar", "16000", "-ac", "1"], "tone.wav");
  silence = ffmpeg(["-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t", "2"], "silence.wav");
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Part = [name: string, value: string | { filename: string; data: Buffer; type?: string }];

/** A multipart/form-data body, as curl -F or the clients send it. */
function form(parts: Part[]): { payload: Buffer; headers: Record<string, string> } {
  const boundary = `----kiln${randomBytes(8).toString("hex")}`;
  const chunks: Buffer[] = [];
  for (const [name, value] of parts) {
    if (typeof value === "string") {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
    } else {
      const head = `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${value.filename}"\r\nContent-Type: ${value.type ?? "audio/wav"}\r\n\r\n`;
      chunks.push(Buffer.from(head), value.data, Buffer.from("\r\n"));
    }
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(chunks), headers: { ...AUTH, "content-type": `multipart/form-data; boundary=${boundary}` } };
}

const wav = (data = tone): Part => ["file", { filename: "speech.wav", data }];

async function speechApp(options: Partial<AppOptions> & { speech?: FakeSpeechOptions } = {}) {
  const speech = fakeSpeechModel(options.speech);
  const text = fakeModel();
  const models = new ModelRegistry();
  models.serve(text.model);
  models.serve(speech.model);
  const app = await buildApp({ ...options, models });
  return { app, speech, models };
}

async function transcribe(parts: Part[], options: Parameters<typeof speechApp>[0] = {}) {
  const { app, speech } = await speechApp(options);
  const res = await app.inject({ method: "POST", url: URL, ...form(parts) });
  return { res, speech, app };
}

const base = (extra: Part[] = []): Part[] => [wav(), ["model", SPEECH_SLUG], ...extra];

function expectError(res: { statusCode: number; json(): any }, status: number, param: string | null, message?: RegExp) {
  expect(res.statusCode).toBe(status);
  const body = res.json();
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(body.error.param).toBe(param);
  if (message) expect(body.error.message).toMatch(message);
  return body.error;
}

/** [start, end] of each cue of an SRT or VTT body, checked for well-formedness on the way. */
function cueTimes(body: string, separator: "," | "."): Array<[number, number]> {
  const ts = separator === "," ? "(\\d{2}):(\\d{2}):(\\d{2}),(\\d{3})" : "(\\d{2}):(\\d{2}):(\\d{2})\\.(\\d{3})";
  const line = new RegExp(`^${ts} --> ${ts}$`);
  const seconds = (m: RegExpMatchArray, at: number) => Number(m[at]) * 3600 + Number(m[at + 1]) * 60 + Number(m[at + 2]) + Number(m[at + 3]) / 1000;
  const blocks = body.split("\n\n").filter((b) => b !== "");
  return blocks.map((block) => {
    const lines = block.split("\n");
    const m = lines.map((l) => l.match(line)).find((x) => x !== null);
    if (!m) throw new Error(`cue without a timing line: ${JSON.stringify(block)}`);
    return [seconds(m, 1), seconds(m, 5)];
  });
}

function expectIncreasing(times: Array<[number, number]>) {
  let last = 0;
  for (const [start, end] of times) {
    expect(start).toBeGreaterThanOrEqual(last);
    expect(end).toBeGreaterThan(start);
    last = end;
  }
}

describe("response formats", () => {
  it("json (the default): text and duration usage, nothing else", async () => {
    const { res, speech } = await transcribe(base());
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    expect(res.json()).toEqual({ text: FULL_TEXT, usage: { type: "duration", seconds: 2 } });
    expect(speech.calls).toHaveLength(1);
    expect(speech.calls[0]).toMatchObject({ samples: 32_000, temperature: 0, wordTimestamps: false, language: undefined, prompt: undefined });
  });

  it("text: the text as text/plain", async () => {
    const { res } = await transcribe(base([["response_format", "text"]]));
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/plain/);
    expect(res.body).toBe(`${FULL_TEXT}\n`);
  });

  it("verbose_json: task, language, duration, text, every segment field, usage; no words unless asked", async () => {
    const { res } = await transcribe(base([["response_format", "verbose_json"]]));
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(["duration", "language", "segments", "task", "text", "usage"]);
    expect(body).toMatchObject({ task: "transcribe", language: "english", duration: 2, text: FULL_TEXT, usage: { type: "duration", seconds: 2 } });
    expect(body.segments).toHaveLength(4);
    body.segments.forEach((s: any, i: number) => {
      expect(Object.keys(s).sort()).toEqual([
        "avg_logprob",
        "compression_ratio",
        "end",
        "id",
        "no_speech_prob",
        "seek",
        "start",
        "temperature",
        "text",
        "tokens",
      ]);
      expect(s).toMatchObject({ id: i, seek: 0, temperature: 0, avg_logprob: -0.25, compression_ratio: 1.1, no_speech_prob: 0.01 });
      expect(Array.isArray(s.tokens) && s.tokens.every(Number.isInteger)).toBe(true);
    });
    expect(
      body.segments
        .map((s: any) => s.text)
        .join("")
        .trim(),
    ).toBe(FULL_TEXT);
    expectIncreasing(body.segments.map((s: any) => [s.start, s.end]));
  });

  it("verbose_json with word timestamps (repeated timestamp_granularities[]): words without their leading space", async () => {
    const { res, speech } = await transcribe(
      base([
        ["response_format", "verbose_json"],
        ["timestamp_granularities[]", "segment"],
        ["timestamp_granularities[]", "word"],
      ]),
    );
    expect(res.statusCode).toBe(200);
    expect(speech.calls[0].wordTimestamps).toBe(true);
    const words = res.json().words;
    expect(words.map((w: any) => w.word).join(" ")).toBe(FULL_TEXT);
    for (const w of words) expect(Object.keys(w).sort()).toEqual(["end", "start", "word"]);
    expectIncreasing(words.map((w: any) => [w.start, w.end]));
  });

  it("also takes the bare name timestamp_granularities", async () => {
    const { res } = await transcribe(
      base([
        ["response_format", "verbose_json"],
        ["timestamp_granularities", "word"],
      ]),
    );
    expect(res.statusCode).toBe(200);
    expect(res.json().words.length).toBeGreaterThan(0);
  });

  it("srt: numbered cues with HH:MM:SS,mmm times, increasing", async () => {
    const { res } = await transcribe(base([["response_format", "srt"]]));
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/plain/);
    const blocks = res.body.split("\n\n").filter((b) => b !== "");
    expect(blocks.map((b) => b.split("\n")[0])).toEqual(["1", "2", "3", "4"]);
    expect(blocks.map((b) => b.split("\n").slice(2).join(" "))).toEqual(["Hello there,", "this is a test.", "And the second window", "ends here."]);
    expect(res.body.endsWith("\n\n")).toBe(true);
    const times = cueTimes(res.body, ",");
    expectIncreasing(times);
    expect(times[0][0]).toBe(0);
    expect(times[3][1]).toBe(2);
    expect(res.body).toContain("00:00:00,000 --> 00:00:00,500");
  });

  it("vtt: the WEBVTT header, then cues with HH:MM:SS.mmm times, increasing, as text/vtt", async () => {
    const { res } = await transcribe(base([["response_format", "vtt"]]));
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/vtt/);
    expect(res.body.startsWith("WEBVTT\n\n")).toBe(true);
    const cues = res.body.slice("WEBVTT\n\n".length);
    const times = cueTimes(cues, ".");
    expect(times).toHaveLength(4);
    expectIncreasing(times);
    expect(cues).toContain("00:00:01.500 --> 00:00:02.000\nends here.\n\n");
  });

  it("silence is an empty transcript, not an error", async () => {
    const { res } = await transcribe([wav(silence), ["model", SPEECH_SLUG]]);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ text: "", usage: { type: "duration", seconds: 2 } });
  });

  it("passes language, prompt and temperature on; ignores unknown and empty fields", async () => {
    const { res, speech } = await transcribe(
      base([
        ["language", "FR"],
        ["prompt", "Bonjour."],
        ["temperature", "0.3"],
        ["stream", "false"],
        ["response_format", ""],
        ["chunking_strategy", "auto"],
        ["whatever", "x"],
      ]),
    );
    expect(res.statusCode).toBe(200);
    expect(res.json().text).toBe(FULL_TEXT);
    expect(speech.calls[0]).toMatchObject({ language: "fr", prompt: "Bonjour.", temperature: 0.3 });
  });

  it("passes beam_size on, and leaves it to the model's default when not given", async () => {
    const { speech } = await transcribe(base([["beam_size", "1"]]));
    expect(speech.calls[0].beamSize).toBe(1);
    const { speech: other } = await transcribe(base([]));
    expect(other.calls[0].beamSize).toBeUndefined();
  });

  it("passes faster-whisper's hotwords on; longer than 1,000 characters is a 400 naming it", async () => {
    const { speech } = await transcribe(base([["hotwords", "Kiln lighthouse-keeper"]]));
    expect(speech.calls[0].hotwords).toBe("Kiln lighthouse-keeper");
    const { res, speech: none } = await transcribe(base([["hotwords", "x".repeat(1001)]]));
    expectError(res, 400, "hotwords", /1000/);
    expect(none.calls).toHaveLength(0);
  });
});

describe("streaming", () => {
  it("sends a delta per window's new text, then done with the whole text and usage, and no [DONE]", async () => {
    const { app } = await speechApp();
    const streamed = await app.inject({ method: "POST", url: URL, ...form(base([["stream", "true"]])) });
    expect(streamed.statusCode).toBe(200);
    expect(streamed.headers["content-type"]).toMatch(/^text\/event-stream/);
    const events = sseEvents(streamed.body) as any[];
    expect(events).not.toContain("[DONE]");
    const deltas = events.slice(0, -1);
    expect(deltas.length).toBe(2);
    for (const d of deltas) expect(Object.keys(d).sort()).toEqual(["delta", "type"]);
    expect(deltas.every((d) => d.type === "transcript.text.delta")).toBe(true);
    expect(events.at(-1)).toEqual({ type: "transcript.text.done", text: FULL_TEXT, usage: { type: "duration", seconds: 2 } });
    const whole = await app.inject({ method: "POST", url: URL, ...form(base()) });
    expect(deltas.map((d) => d.delta).join("")).toBe(whole.json().text);
  });

  it("deltas join to the text exactly whatever the segments' spacing", async () => {
    const windows = [["  Leading", " spaces "], ["", "\tand tabs\n", " "], [" end."]];
    const { app } = await speechApp({ speech: { windows } });
    const streamed = sseEvents((await app.inject({ method: "POST", url: URL, ...form(base([["stream", "true"]])) })).body) as any[];
    const whole = (await app.inject({ method: "POST", url: URL, ...form(base()) })).json().text;
    expect(whole).toBe("Leading spaces \tand tabs\n  end.");
    expect(
      streamed
        .slice(0, -1)
        .map((d) => d.delta)
        .join(""),
    ).toBe(whole);
    expect(streamed.at(-1).text).toBe(whole);
  });

  it("a stream of silence is just the done event with empty text", async () => {
    const { res } = await transcribe([wav(silence), ["model", SPEECH_SLUG], ["stream", "true"]]);
    expect(sseEvents(res.body)).toEqual([{ type: "transcript.text.done", text: "", usage: { type: "duration", seconds: 2 } }]);
  });

  it("refuses stream with a format that has no place in text events", async () => {
    const { res } = await transcribe(
      base([
        ["stream", "true"],
        ["response_format", "srt"],
      ]),
    );
    expectError(res, 400, "response_format");
  });
});

describe("bad requests", () => {
  it("missing file: 400 param file", async () => {
    const { res } = await transcribe([["model", SPEECH_SLUG]]);
    expect(expectError(res, 400, "file").code).toBe("missing_required_parameter");
  });

  it("file as a text field: 400 param file", async () => {
    const { res } = await transcribe([
      ["file", "not a file"],
      ["model", SPEECH_SLUG],
    ]);
    expectError(res, 400, "file");
  });

  it("empty file: 400 param file saying it is empty", async () => {
    const { res } = await transcribe([wav(Buffer.alloc(0)), ["model", SPEECH_SLUG]]);
    expectError(res, 400, "file", /empty/);
  });

  it("random bytes: 400 param file saying the format is not supported (or the file corrupt)", async () => {
    const { res, speech } = await transcribe([
      ["file", { filename: "noise.bin", data: randomBytes(4096), type: "application/octet-stream" }],
      ["model", SPEECH_SLUG],
    ]);
    expectError(res, 400, "file", /supported audio format|corrupt/);
    expect(speech.calls).toHaveLength(0);
  });

  it("a wav cut short: 400 param file", async () => {
    const { res } = await transcribe([wav(tone.subarray(0, 30)), ["model", SPEECH_SLUG]]);
    expectError(res, 400, "file");
  });

  it("a file one byte over 25 MB: 413 param file; one declared far over it: 413 before reading", async () => {
    const { app } = await speechApp();
    const over = await app.inject({ method: "POST", url: URL, ...form([wav(Buffer.alloc(MAX_FILE_BYTES + 1)), ["model", SPEECH_SLUG]]) });
    expect(expectError(over, 413, "file", /25 MB/)).toMatchObject({ type: "invalid_request_error", code: "request_too_large" });
    const far = await app.inject({ method: "POST", url: URL, ...form([wav(Buffer.alloc(MAX_FILE_BYTES + 2 * 1024 * 1024)), ["model", SPEECH_SLUG]]) });
    expectError(far, 413, "file");
    // Exactly at the limit is read (and then fails as audio, which zeros are not).
    const at = await app.inject({ method: "POST", url: URL, ...form([wav(Buffer.alloc(MAX_FILE_BYTES)), ["model", SPEECH_SLUG]]) });
    expectError(at, 400, "file");
  });

  it("the JSON routes keep their own body limit", async () => {
    const { app } = await speechApp({ bodyLimit: 1024 });
    const res = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      headers: AUTH,
      payload: { model: SLUG, messages: [{ role: "user", content: "x".repeat(2000) }] },
    });
    expect(res.statusCode).toBe(413);
    const ok = await app.inject({ method: "POST", url: URL, ...form(base()) });
    expect(ok.statusCode).toBe(200);
  });

  it("a JSON body: 400 asking for multipart/form-data", async () => {
    const { app } = await speechApp();
    const res = await app.inject({ method: "POST", url: URL, headers: AUTH, payload: { model: SPEECH_SLUG } });
    expectError(res, 400, null, /multipart\/form-data/);
  });

  it("bad language: not two letters, or not one the model knows: 400 param language", async () => {
    for (const language of ["english", "x1", "ja"]) {
      const { res } = await transcribe(base([["language", language]]));
      expectError(res, 400, "language");
    }
  });

  it("word timestamps without verbose_json: 400 param timestamp_granularities", async () => {
    for (const format of ["json", "text", "srt"]) {
      const { res } = await transcribe(
        base([
          ["timestamp_granularities[]", "word"],
          ["response_format", format],
        ]),
      );
      expectError(res, 400, "timestamp_granularities", /verbose_json/);
    }
  });

  it("a beam wider than the server allows: 400 param beam_size naming the limit", async () => {
    const { res, speech } = await transcribe(base([["beam_size", "6"]]));
    expectError(res, 400, "beam_size", /at most 5.*--beam-size/);
    expect(speech.calls).toHaveLength(0);
  });

  it("bad values: 400 naming the field", async () => {
    const cases: Array<[Part, string]> = [
      [["temperature", "hot"], "temperature"],
      [["temperature", "1.5"], "temperature"],
      [["response_format", "docx"], "response_format"],
      [["timestamp_granularities[]", "sentence"], "timestamp_granularities[0]"],
      [["stream", "yes"], "stream"],
      [["beam_size", "0"], "beam_size"],
      [["beam_size", "2.5"], "beam_size"],
      [["beam_size", "wide"], "beam_size"],
    ];
    for (const [part, param] of cases) {
      const { res } = await transcribe(base([part]));
      expectError(res, 400, param);
    }
  });

  it("a form number out of range is named as the number it is, not as the string the form carried", async () => {
    const { res } = await transcribe(base([["temperature", "1.5"]]));
    expectError(res, 400, "temperature", /^Invalid 'temperature': expected a value <= 1, but got 1\.5 instead\.$/);
    const { res: fraction } = await transcribe(base([["beam_size", "2.5"]]));
    expectError(fraction, 400, "beam_size", /^Invalid type for 'beam_size': expected an integer, but got 2\.5 instead\.$/);
    const { res: word } = await transcribe(base([["beam_size", "wide"]]));
    expectError(word, 400, "beam_size", /but got a string \('wide'\) instead\.$/);
  });

  it("a text model named for transcription, a speech model named for chat or completions: 400 param model", async () => {
    const { app } = await speechApp();
    const text = await app.inject({ method: "POST", url: URL, ...form([wav(), ["model", SLUG]]) });
    expectError(text, 400, "model", /not a transcription model/);
    const chat = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      headers: AUTH,
      payload: { model: SPEECH_SLUG, messages: [{ role: "user", content: "hi" }] },
    });
    expectError(chat, 400, "model", /transcription model.*\/v1\/audio\/transcriptions/);
    const completion = await app.inject({ method: "POST", url: "/v1/completions", headers: AUTH, payload: { model: SPEECH_SLUG, prompt: "hi" } });
    expectError(completion, 400, "model", /\/v1\/audio\/transcriptions/);
    // A speech model of the catalogue this server does not serve is still the wrong kind for chat.
    const unserved = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      headers: AUTH,
      payload: { model: "whisper-base", messages: [{ role: "user", content: "hi" }] },
    });
    expectError(unserved, 400, "model");
    const unknown = await app.inject({ method: "POST", url: URL, ...form([wav(), ["model", "no-such-model"]]) });
    expectError(unknown, 404, "model");
  });

  it("a full queue: 503 overloaded with retry-after", async () => {
    const { res } = await transcribe(base(), { speech: { fail: new OverloadedError(SPEECH_SLUG, 64) } });
    expect(expectError(res, 503, null).code).toBe("overloaded");
    expect(res.headers["retry-after"]).toBeDefined();
  });

  it("no ffmpeg: a 500 saying so", async () => {
    const saved = process.env.KILN_FFMPEG;
    process.env.KILN_FFMPEG = join(dir, "no-such-ffmpeg");
    try {
      // A 16 kHz PCM WAV is decoded without ffmpeg; FLAC needs it.
      const flac = execFileSync("ffmpeg", [
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-i",
        join(dir, "tone.wav"),
        "-c:a",
        "flac",
        "-f",
        "flac",
        "pipe:1",
      ]);
      const { res } = await transcribe([
        ["file", { filename: "speech.flac", data: flac, type: "audio/flac" }],
        ["model", SPEECH_SLUG],
      ]);
      expect(expectError(res, 500, null, /ffmpeg is not installed/).type).toBe("server_error");
    } finally {
      if (saved === undefined) delete process.env.KILN_FFMPEG;
      else process.env.KILN_FFMPEG = saved;
    }
  });
});

describe("over a real connection", () => {
  async function listening(speech: FakeSpeechOptions) {
    const { app, speech: fake } = await speechApp({ speech });
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    return { app, fake, url };
  }

  /** Sends a form and destroys the connection once `leaveWhen` says so (given what has arrived). */
  function sendAndLeave(url: string, parts: Part[], leaveWhen: (received: string) => boolean): Promise<void> {
    const { payload, headers } = form(parts);
    return new Promise((resolve) => {
      const req = httpRequest(`${url}${URL}`, { method: "POST", headers: { ...headers, "content-length": String(payload.length) } }, (res) => {
        let received = "";
        res.on("data", (chunk) => {
          received += chunk;
          if (leaveWhen(received)) req.destroy();
        });
      });
      req.on("error", () => {});
      req.on("close", () => resolve());
      req.end(payload);
    });
  }

  async function until(check: () => boolean, ms = 5000) {
    const deadline = Date.now() + ms;
    while (!check()) {
      if (Date.now() > deadline) throw new Error("timed out");
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  it("a client that leaves a streamed transcription aborts the model call", async () => {
    const windows = Array.from({ length: 50 }, (_, i) => [` window ${i}.`]);
    const { app, fake, url } = await listening({ windows, windowDelayMs: 50 });
    try {
      await sendAndLeave(url, base([["stream", "true"]]), (got) => got.includes("transcript.text.delta"));
      await until(() => fake.outcomes.length > 0);
      expect(fake.outcomes).toEqual(["aborted"]);
      expect(fake.calls[0].signal?.aborted).toBe(true);
    } finally {
      await app.close();
    }
  });

  it("a client that leaves a non-streamed transcription aborts the model call", async () => {
    const windows = Array.from({ length: 50 }, (_, i) => [` window ${i}.`]);
    const { app, fake, url } = await listening({ windows, windowDelayMs: 50 });
    try {
      const { payload, headers } = form(base());
      const req = httpRequest(`${url}${URL}`, { method: "POST", headers: { ...headers, "content-length": String(payload.length) } });
      req.on("error", () => {});
      req.end(payload);
      await until(() => fake.calls.length > 0);
      req.destroy();
      await until(() => fake.outcomes.length > 0);
      expect(fake.outcomes).toEqual(["aborted"]);
    } finally {
      await app.close();
    }
  });

  it("the official npm openai client: json, verbose_json, srt and a stream", async () => {
    const { app, url } = await listening({});
    try {
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test", maxRetries: 0 });
      const file = () => toFile(tone, "tone.wav", { type: "audio/wav" });
      const json = await client.audio.transcriptions.create({ file: await file(), model: SPEECH_SLUG });
      expect(json.text).toBe(FULL_TEXT);
      expect(json.usage).toEqual({ type: "duration", seconds: 2 });
      const verbose = await client.audio.transcriptions.create({
        file: await file(),
        model: SPEECH_SLUG,
        response_format: "verbose_json",
        timestamp_granularities: ["word", "segment"],
      });
      expect(verbose.language).toBe("english");
      expect(verbose.duration).toBe(2);
      expect(
        verbose.segments
          ?.map((s) => s.text)
          .join("")
          .trim(),
      ).toBe(FULL_TEXT);
      expect(verbose.words?.length).toBe(FULL_TEXT.split(" ").length);
      const srt = await client.audio.transcriptions.create({ file: await file(), model: SPEECH_SLUG, response_format: "srt" });
      expect(typeof srt).toBe("string");
      expect(srt.startsWith("1\n00:00:00,000 --> ")).toBe(true);
      const stream = await client.audio.transcriptions.create({ file: await file(), model: SPEECH_SLUG, stream: true });
      const events: any[] = [];
      for await (const event of stream) events.push(event);
      expect(events.at(-1)).toMatchObject({ type: "transcript.text.done", text: FULL_TEXT, usage: { type: "duration", seconds: 2 } });
      expect(
        events
          .slice(0, -1)
          .map((e) => e.delta)
          .join(""),
      ).toBe(FULL_TEXT);
      // Errors come back as the client's error classes.
      await expect(client.audio.transcriptions.create({ file: await file(), model: SLUG })).rejects.toMatchObject({ status: 400, param: "model" });
    } finally {
      await app.close();
    }
  });
});

describe("metering and metrics", () => {
  it("cloud mode records a usage row with the audio seconds and the per-minute cost", async () => {
    const db = openDatabase({ path: ":memory:" });
    const keys = sqliteKeyStore(db);
    const { key, record } = await keys.create("billing");
    const { app } = await speechApp({ auth: { mode: "cloud", keys }, usage: sqliteUsageRecorder(db, (slug) => getModel(slug)) });
    const f = form(base());
    const res = await app.inject({ method: "POST", url: URL, payload: f.payload, headers: { ...f.headers, authorization: `Bearer ${key}` } });
    expect(res.statusCode).toBe(200);
    const rows = db.prepare("SELECT * FROM usage").all() as any[];
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ key_id: record.id, slug: SPEECH_SLUG, prompt_tokens: 0, completion_tokens: 0, audio_ms: 2000 });
    expect(rows[0].request_id).toMatch(/^transcr-/);
    // Integer nano-USD, rounded up once per request: 2 s at the per-minute price.
    const nanoPerMinute = Math.round(getModel(SPEECH_SLUG).prices.usdPerAudioMinute! * 1e9);
    expect(rows[0].nano_usd_per_audio_minute).toBe(nanoPerMinute);
    expect(rows[0].cost_nano_usd).toBe(Math.ceil((2000 * nanoPerMinute) / 60_000));
  });

  it("a transcription its queue refuses (503) is not metered", async () => {
    const db = openDatabase({ path: ":memory:" });
    const keys = sqliteKeyStore(db);
    const { key } = await keys.create("billing");
    const { app } = await speechApp({
      auth: { mode: "cloud", keys },
      usage: sqliteUsageRecorder(db, (slug) => getModel(slug)),
      speech: { fail: new OverloadedError(SPEECH_SLUG, 64) },
    });
    const f = form(base());
    const res = await app.inject({ method: "POST", url: URL, payload: f.payload, headers: { ...f.headers, authorization: `Bearer ${key}` } });
    expect(res.statusCode).toBe(503);
    expect(db.prepare("SELECT COUNT(*) AS n FROM usage").get()).toEqual({ n: 0 });
  });

  it("a request refused before the model (bad file) is not metered", async () => {
    const db = openDatabase({ path: ":memory:" });
    const keys = sqliteKeyStore(db);
    const { key } = await keys.create("billing");
    const { app } = await speechApp({ auth: { mode: "cloud", keys }, usage: sqliteUsageRecorder(db, (slug) => getModel(slug)) });
    const f = form([wav(Buffer.alloc(0)), ["model", SPEECH_SLUG]]);
    const res = await app.inject({ method: "POST", url: URL, payload: f.payload, headers: { ...f.headers, authorization: `Bearer ${key}` } });
    expect(res.statusCode).toBe(400);
    expect(db.prepare("SELECT COUNT(*) AS n FROM usage").get()).toEqual({ n: 0 });
  });

  it("the spool keeps audio seconds, and reads lines written before it had them", () => {
    const path = join(dir, "spool.jsonl");
    writeFileSync(
      path,
      `${JSON.stringify({ requestId: "chatcmpl-old", keyId: null, slug: SLUG, promptTokens: 3, completionTokens: 4, at: "2025-01-01T00:00:00.000Z" })}\n`,
    );
    const spool = new UsageSpool(path);
    spool.append([
      { requestId: "transcr-new", keyId: null, slug: SPEECH_SLUG, promptTokens: 0, completionTokens: 0, audioSeconds: 2, at: "2025-01-01T00:00:01.000Z" },
    ]);
    const { entries, bad } = spool.read();
    expect(bad).toEqual([]);
    expect(entries[0]).not.toHaveProperty("audioSeconds");
    expect(entries[1]).toMatchObject({ requestId: "transcr-new", audioSeconds: 2 });
  });

  it("/metrics counts transcriptions and audio seconds; /v1/models and /health know the speech model", async () => {
    const { app } = await speechApp();
    await app.inject({ method: "POST", url: URL, ...form(base()) });
    const metrics = (await app.inject({ method: "GET", url: "/metrics" })).body;
    expect(metrics).toContain(`kiln_transcription_requests_total{model="${SPEECH_SLUG}"} 1`);
    expect(metrics).toContain(`kiln_audio_seconds_total{model="${SPEECH_SLUG}"} 2`);
    expect(metrics).not.toContain(`kiln_kv_slots{model="${SPEECH_SLUG}"}`);
    const model = (await app.inject({ method: "GET", url: `/v1/models/${SPEECH_SLUG}`, headers: AUTH })).json();
    expect(model).toMatchObject({ id: SPEECH_SLUG, kind: "transcription", status: "serving", artifact_id: "fake-speech-artifact-1" });
    expect(model).not.toHaveProperty("measured_output_tokens_per_second");
    const health = await app.inject({ method: "GET", url: "/health" });
    expect(health.statusCode).toBe(200);
    expect(health.json().models).toMatchObject({ [SPEECH_SLUG]: "serving", [SLUG]: "serving" });
    await app.close();
  });
});
