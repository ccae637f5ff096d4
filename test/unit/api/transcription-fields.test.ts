/**
 * The transcription form's reference-API fields beyond the basics (include[], chunking_strategy as
 * the clients flatten it) and kiln's vad_filter, and /v1/audio/translations, over the real app and
 * multipart parser with a fake speech model: what reaches the model, and the errors' params.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp } from "../../../src/api/app.js";
import { ModelRegistry } from "../../../src/scheduler/index.js";
import { AUTH } from "./fake-model.js";
import { fakeSpeechModel, SPEECH_SLUG, type FakeSpeechOptions } from "./fake-speech-model.js";

let dir: string;
let tone: Buffer;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "kiln-transcription-fields-"));
  const out = join(dir, "tone.wav");
  execFileSync("ffmpeg", [
    "-nostdin",
    "-hide_banner",
    "-loglevel",
    "error",
    "-y",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:duration=1",
    "-ar",
    "16000",
    "-ac",
    "1",
    out,
  ]);
  tone = readFileSync(out);
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A multipart body: the tone as `file`, the model, then `fields` in order. */
function form(fields: Array<[string, string]>): { payload: Buffer; headers: Record<string, string> } {
  const boundary = `----kiln${randomBytes(8).toString("hex")}`;
  const part = (name: string, value: string) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  const chunks = [
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="tone.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    tone,
    Buffer.from("\r\n" + part("model", SPEECH_SLUG) + fields.map(([n, v]) => part(n, v)).join("") + `--${boundary}--\r\n`),
  ];
  return { payload: Buffer.concat(chunks), headers: { ...AUTH, "content-type": `multipart/form-data; boundary=${boundary}` } };
}

async function post(url: string, fields: Array<[string, string]>, speech: FakeSpeechOptions = {}) {
  const fake = fakeSpeechModel(speech);
  const models = new ModelRegistry();
  models.serve(fake.model);
  const app = await buildApp({ models });
  const res = await app.inject({ method: "POST", url, ...form(fields) });
  await app.close();
  return { res, calls: fake.calls };
}

const transcribe = (fields: Array<[string, string]>, speech?: FakeSpeechOptions) => post("/v1/audio/transcriptions", fields, speech);

describe("voice activity detection fields", () => {
  it("leaves the choice to the server when neither field is sent, and passes vad_filter as sent", async () => {
    expect((await transcribe([])).calls[0].vadFilter).toBeUndefined();
    expect((await transcribe([["vad_filter", "true"]])).calls[0].vadFilter).toBe(true);
    expect((await transcribe([["vad_filter", "False"]])).calls[0].vadFilter).toBe(false);
  });

  it("maps chunking_strategy auto, and server_vad as flattened form fields or a JSON string, onto the detector's options", async () => {
    expect((await transcribe([["chunking_strategy", "auto"]])).calls[0].vadFilter).toBe(true);
    const expected = { threshold: 0.3, minSilenceDurationMs: 500, speechPadMs: 100 };
    const flat = await transcribe([
      ["chunking_strategy[type]", "server_vad"],
      ["chunking_strategy[threshold]", "0.3"],
      ["chunking_strategy[silence_duration_ms]", "500"],
      ["chunking_strategy[prefix_padding_ms]", "100"],
    ]);
    expect(flat.res.statusCode).toBe(200);
    expect(flat.calls[0].vadFilter).toEqual(expected);
    const json = await transcribe([
      ["chunking_strategy", JSON.stringify({ type: "server_vad", threshold: 0.3, silence_duration_ms: 500, prefix_padding_ms: 100 })],
    ]);
    expect(json.calls[0].vadFilter).toEqual(expected);
    expect((await transcribe([["chunking_strategy[type]", "server_vad"]])).calls[0].vadFilter).toEqual({});
  });

  it("refuses a chunking_strategy it does not know, naming the field", async () => {
    for (const fields of [
      [["chunking_strategy", "manual"]],
      [["chunking_strategy[type]", "semantic_vad"]],
      [
        ["chunking_strategy[type]", "server_vad"],
        ["chunking_strategy[threshold]", "2"],
      ],
    ] as Array<Array<[string, string]>>) {
      const { res } = await transcribe(fields);
      expect(res.statusCode, JSON.stringify(fields)).toBe(400);
      expect(res.json().error.param).toMatch(/^chunking_strategy/);
    }
  });
});

describe("include[]=logprobs", () => {
  it("asks the model for log-probabilities and answers json with a logprobs list", async () => {
    const { res, calls } = await transcribe([["include[]", "logprobs"]]);
    expect(res.statusCode).toBe(200);
    expect(calls[0].logprobs).toBe(true);
    expect(res.json()).toHaveProperty("logprobs");
    const plain = await transcribe([]);
    expect(plain.calls[0].logprobs).toBe(false);
    expect(plain.res.json()).not.toHaveProperty("logprobs");
  });

  it("is refused with another format, with stream, and for anything but logprobs, naming include", async () => {
    for (const fields of [
      [
        ["include[]", "logprobs"],
        ["response_format", "verbose_json"],
      ],
      [
        ["include[]", "logprobs"],
        ["stream", "true"],
      ],
      [["include[]", "tokens"]],
    ] as Array<Array<[string, string]>>) {
      const { res } = await transcribe(fields);
      expect(res.statusCode, JSON.stringify(fields)).toBe(400);
      expect(res.json().error.param).toMatch(/^include/);
    }
  });
});

describe("language", () => {
  it("takes Whisper's three-letter codes where the model knows them (Cantonese on large-v3), and names the field otherwise", async () => {
    const known = await transcribe([["language", "yue"]], { languages: ["en", "zh", "yue"] });
    expect(known.res.statusCode).toBe(200);
    expect(known.calls[0].language).toBe("yue");
    for (const [language, languages] of [
      ["yue", ["en", "zh"]],
      ["cant", ["en", "yue"]],
    ] as const) {
      const { res } = await transcribe([["language", language]], { languages });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.param).toBe("language");
    }
  });
});

describe("POST /v1/audio/translations", () => {
  it("runs the translate task on a multilingual model, with the reference API's fields", async () => {
    const { res, calls } = await post("/v1/audio/translations", [
      ["prompt", "Bonjour."],
      ["temperature", "0.2"],
      ["response_format", "verbose_json"],
    ]);
    expect(res.statusCode).toBe(200);
    expect(calls[0]).toMatchObject({ task: "translate", prompt: "Bonjour.", temperature: 0.2, language: undefined, wordTimestamps: false });
  });

  it("refuses an English-only model with 400 naming model", async () => {
    const { res, calls } = await post("/v1/audio/translations", [], { languages: ["en"] });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ param: "model", type: "invalid_request_error" });
    expect(res.json().error.message).toMatch(/English-only/);
    expect(calls).toHaveLength(0);
  });

  it("transcriptions keep the transcribe task", async () => {
    expect((await transcribe([])).calls[0].task).toBe("transcribe");
  });
});
