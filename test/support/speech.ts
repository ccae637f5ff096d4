/**
 * Speech test fixtures: English sentences of our own, spoken by espeak-ng with several voices and
 * speeds, each converted by ffmpeg into every upload format the transcription API accepts. They are
 * generated once into the test KILN_HOME (`$KILN_HOME/speech/<hash>/`), keyed by a hash of the
 * definitions below, so editing a sentence or a format regenerates them and nothing else does.
 * espeak-ng and ffmpeg come from scripts/setup.sh. Every tool runs without a shell.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

/** Upload formats the transcription endpoint accepts (OpenAI's list). */
export const SPEECH_FORMATS = ["flac", "mp3", "mp4", "m4a", "mpeg", "mpga", "ogg", "wav", "webm"] as const;
export type SpeechFormat = (typeof SPEECH_FORMATS)[number];

/** ffmpeg output options per format: audio-only, lossy formats at modest bitrates as uploads would be. */
const FORMAT_ARGS: Record<SpeechFormat, string[]> = {
  flac: ["-c:a", "flac"],
  mp3: ["-c:a", "libmp3lame", "-b:a", "64k"],
  mp4: ["-c:a", "aac", "-b:a", "64k", "-f", "mp4"],
  m4a: ["-c:a", "aac", "-b:a", "64k", "-f", "ipod"],
  mpeg: ["-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"],
  mpga: ["-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"],
  ogg: ["-c:a", "libvorbis", "-q:a", "4"],
  wav: ["-c:a", "pcm_s16le"],
  webm: ["-c:a", "libopus", "-b:a", "48k", "-f", "webm"],
};

export interface SpeechFixture {
  name: string;
  /** The sentence(s) spoken; "" for silence. */
  text: string;
  /** Duration of the spoken WAV, in seconds. */
  seconds: number;
  /** The same audio in every upload format. */
  files: Record<SpeechFormat, string>;
}

interface Utterance {
  name: string;
  /** espeak-ng voice, e.g. "en-us" or "en-gb+f3" (language + variant). */
  voice: string;
  /** Words per minute (espeak-ng -s). */
  speed: number;
  text: string;
}

const SENTENCES: Utterance[] = [
  { name: "lighthouse", voice: "en-us", speed: 160, text: "The old lighthouse keeper painted the railing blue every spring." },
  { name: "bakery", voice: "en-gb", speed: 150, text: "Our bakery opens at seven and sells warm bread until noon." },
  { name: "train", voice: "en-us+f3", speed: 170, text: "The evening train to the coast was delayed by twenty minutes." },
  { name: "garden", voice: "en-gb+m3", speed: 140, text: "She planted tomatoes, beans and sunflowers in the small garden." },
  { name: "library", voice: "en-us+m2", speed: 180, text: "Please return the library books before the end of the month." },
  { name: "weather", voice: "en-gb+f2", speed: 130, text: "A cold wind blew across the hills as the clouds grew darker." },
  { name: "kitchen", voice: "en-us", speed: 190, text: "He washed the dishes and left them to dry beside the window." },
  { name: "river", voice: "en-gb", speed: 165, text: "The children watched the boats drift slowly down the river." },
  { name: "meeting", voice: "en-us+f4", speed: 155, text: "The meeting starts after lunch in the room on the second floor." },
  { name: "mountain", voice: "en-gb+m1", speed: 145, text: "We climbed the mountain early to see the sun rise over the valley." },
  { name: "market", voice: "en-us+m3", speed: 175, text: "Fresh apples and pears were piled high at the farmers market." },
  { name: "letter", voice: "en-gb+f3", speed: 135, text: "My grandmother wrote me a long letter about her trip to the sea." },
];

/** Over 30 s, so a transcription needs two windows. */
const LONG_SPEECH: Utterance = {
  name: "long",
  voice: "en-us",
  speed: 145,
  text: [
    "Every morning the village wakes to the sound of the church bell.",
    "The baker lights his oven long before the sun comes up.",
    "Farmers drive their tractors along the narrow road to the fields.",
    "By eight o'clock the school yard is full of children playing games.",
    "Their teacher rings a small bell and everyone lines up at the door.",
    "In the afternoon the old men sit in the square and talk about the weather.",
    "When evening comes the lights go on one by one in every window.",
    "Then the village falls quiet again until the bell rings the next day.",
    "Nobody there would ever want to live anywhere else.",
  ].join(" "),
};

const SILENCE_SECONDS = 4;
/** Pause between sentences in {@link longSpeech}, in seconds. */
const PAUSE_SECONDS = 0.4;
/** Bump to regenerate every fixture (e.g. after changing how files are produced). */
const FIXTURE_VERSION = 1;

/** The test KILN_HOME (vitest.config.ts sets KILN_HOME), else the repository's .kiln-test. */
function speechRoot(): string {
  return join(process.env.KILN_HOME ?? resolve(".kiln-test"), "speech");
}

function run(command: string, args: string[]): void {
  const result = spawnSync(command, args, { stdio: ["ignore", "ignore", "pipe"], encoding: "utf8", shell: false });
  if (result.error) throw new Error(`${command} could not start (${result.error.message}); run scripts/setup.sh`);
  if (result.status !== 0) throw new Error(`${command} ${args.join(" ")} failed: ${result.stderr.trim()}`);
}

const FFMPEG_QUIET = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"];

function speak(utterance: Utterance, wav: string): void {
  run("espeak-ng", ["-v", utterance.voice, "-s", String(utterance.speed), "-w", wav, utterance.text]);
}

/** Duration in seconds from a WAV's header (espeak-ng and ffmpeg write plain PCM RIFF files). */
export function wavSeconds(path: string): number {
  const bytes = readFileSync(path);
  const byteRate = bytes.readUInt32LE(28);
  let offset = 12;
  while (offset + 8 <= bytes.length) {
    const id = bytes.toString("ascii", offset, offset + 4);
    const size = bytes.readUInt32LE(offset + 4);
    // Streamed WAVs may leave the data size unset (0 or 0xffffffff): the rest of the file is data.
    if (id === "data") return Math.min(size || Infinity, bytes.length - offset - 8) / byteRate;
    offset += 8 + size + (size % 2);
  }
  throw new Error(`${path}: no data chunk`);
}

function convertToFormats(source: string, dir: string, name: string): Record<SpeechFormat, string> {
  const files = {} as Record<SpeechFormat, string>;
  for (const format of SPEECH_FORMATS) {
    const out = join(dir, `${name}.${format}`);
    run("ffmpeg", [...FFMPEG_QUIET, "-i", source, "-vn", ...FORMAT_ARGS[format], out]);
    files[format] = out;
  }
  return files;
}

function definitionsHash(extra: unknown): string {
  const definitions = { FIXTURE_VERSION, SENTENCES, LONG_SPEECH, SILENCE_SECONDS, FORMAT_ARGS, extra };
  return createHash("sha256").update(JSON.stringify(definitions)).digest("hex").slice(0, 16);
}

/**
 * Builds a cache folder once: `build` fills a fresh temp folder and returns the index, which is
 * written last; the folder is then renamed into place, so an interrupted run leaves nothing half made.
 */
function cached<T>(key: string, build: (dir: string) => T): { dir: string; index: T } {
  const dir = join(speechRoot(), key);
  const indexPath = join(dir, "index.json");
  if (existsSync(indexPath)) return { dir, index: JSON.parse(readFileSync(indexPath, "utf8")) as T };
  const temp = `${dir}.tmp-${process.pid}`;
  rmSync(temp, { recursive: true, force: true });
  mkdirSync(temp, { recursive: true });
  const index = build(temp);
  writeFileSync(join(temp, "index.json"), JSON.stringify(index, null, 1));
  rmSync(dir, { recursive: true, force: true });
  renameSync(temp, dir);
  return { dir, index };
}

/** Paths inside the index are stored relative to its folder, so the cache can move. */
function absolutize(dir: string, fixture: SpeechFixture): SpeechFixture {
  const files = Object.fromEntries(Object.entries(fixture.files).map(([f, p]) => [f, join(dir, p)])) as Record<SpeechFormat, string>;
  return { ...fixture, files };
}

function relativeFiles(dir: string, files: Record<SpeechFormat, string>): Record<SpeechFormat, string> {
  return Object.fromEntries(Object.entries(files).map(([f, p]) => [f, p.slice(dir.length + 1)])) as Record<SpeechFormat, string>;
}

let fixtures: SpeechFixture[] | undefined;

/**
 * The speech fixtures: the sentences, one file over 30 s ("long") and 4 s of silence ("silence"),
 * each in every upload format. Generated on first use (tens of seconds), then read from the cache.
 */
export function speechFixtures(): SpeechFixture[] {
  if (fixtures) return fixtures;
  const { dir, index } = cached(`fixtures-${definitionsHash(null)}`, (temp) => {
    const made: SpeechFixture[] = [];
    for (const utterance of [...SENTENCES, LONG_SPEECH]) {
      const wav = join(temp, `${utterance.name}.source.wav`);
      speak(utterance, wav);
      made.push({
        name: utterance.name,
        text: utterance.text,
        seconds: wavSeconds(wav),
        files: relativeFiles(temp, convertToFormats(wav, temp, utterance.name)),
      });
    }
    const silence = join(temp, "silence.source.wav");
    run("ffmpeg", [...FFMPEG_QUIET, "-f", "lavfi", "-i", `anullsrc=r=16000:cl=mono`, "-t", String(SILENCE_SECONDS), "-c:a", "pcm_s16le", silence]);
    made.push({ name: "silence", text: "", seconds: wavSeconds(silence), files: relativeFiles(temp, convertToFormats(silence, temp, "silence")) });
    return made;
  });
  fixtures = index.map((fixture) => absolutize(dir, fixture));
  return fixtures;
}

/** One fixture by name ("lighthouse", ..., "long", "silence"). */
export function speechFixture(name: string): SpeechFixture {
  const fixture = speechFixtures().find((f) => f.name === name);
  if (!fixture) throw new Error(`no speech fixture named ${name}`);
  return fixture;
}

export interface LongSpeech {
  /** A 16 kHz mono 16-bit WAV. */
  path: string;
  /** What is spoken, sentence after sentence. */
  text: string;
  seconds: number;
}

/**
 * About `seconds` of speech (never less; at most one sentence more): the sentences in turn, cycling
 * through voices and speeds, with a short pause between them. For benchmarks and long-audio tests.
 */
export function longSpeech(seconds: number): LongSpeech {
  const { dir, index } = cached(`long-${Math.round(seconds)}-${definitionsHash({ PAUSE_SECONDS })}`, (temp) => {
    const pcm: Buffer[] = [];
    const texts: string[] = [];
    const pause = Buffer.alloc(Math.round(PAUSE_SECONDS * 16000) * 2);
    // Each sentence is spoken once and its samples reused on every cycle.
    const spoken = new Map<Utterance, Buffer>();
    const samplesOf = (utterance: Utterance): Buffer => {
      const wav = join(temp, "sentence.wav");
      const raw = join(temp, "sentence.raw");
      speak(utterance, wav);
      run("ffmpeg", [...FFMPEG_QUIET, "-i", wav, "-f", "s16le", "-ac", "1", "-ar", "16000", raw]);
      const samples = readFileSync(raw);
      rmSync(wav);
      rmSync(raw);
      return samples;
    };
    let total = 0;
    for (let i = 0; total < seconds; i++) {
      const utterance = SENTENCES[i % SENTENCES.length];
      if (!spoken.has(utterance)) spoken.set(utterance, samplesOf(utterance));
      const samples = spoken.get(utterance)!;
      pcm.push(samples, pause);
      texts.push(utterance.text);
      total += samples.length / 32000 + PAUSE_SECONDS;
    }
    writeFileSync(join(temp, "speech.wav"), wavFile(Buffer.concat(pcm), 16000));
    return { path: "speech.wav", text: texts.join(" "), seconds: total };
  });
  return { ...index, path: join(dir, index.path) };
}

/** A mono 16-bit PCM RIFF/WAVE file around `pcm`. */
function wavFile(pcm: Buffer, sampleRate: number): Buffer {
  const header = Buffer.alloc(44);
  header.write("RIFF", 0, "ascii");
  header.writeUInt32LE(36 + pcm.length, 4);
  header.write("WAVEfmt ", 8, "ascii");
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(sampleRate, 24);
  header.writeUInt32LE(sampleRate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write("data", 36, "ascii");
  header.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([header, pcm]);
}

export interface PaddedSpeech {
  /** A 16 kHz mono 16-bit WAV: silence, the sentence, silence. */
  path: string;
  text: string;
  /** Where the speech starts and ends, in seconds from the file's start. */
  speechStart: number;
  speechEnd: number;
  seconds: number;
}

/** One of the sentences between `leadSeconds` and `tailSeconds` of digital silence (voice activity detection tests). */
export function paddedSpeech(name: string, leadSeconds: number, tailSeconds: number): PaddedSpeech {
  const utterance = SENTENCES.find((u) => u.name === name);
  if (!utterance) throw new Error(`no sentence named ${name}`);
  const key = `padded-${name}-${leadSeconds}-${tailSeconds}-${definitionsHash(null)}`;
  const { dir, index } = cached(key, (temp) => {
    const wav = join(temp, "sentence.wav");
    const raw = join(temp, "sentence.raw");
    speak(utterance, wav);
    run("ffmpeg", [...FFMPEG_QUIET, "-i", wav, "-f", "s16le", "-ac", "1", "-ar", "16000", raw]);
    const speech = readFileSync(raw);
    rmSync(wav);
    rmSync(raw);
    const lead = Buffer.alloc(Math.round(leadSeconds * 16000) * 2);
    const tail = Buffer.alloc(Math.round(tailSeconds * 16000) * 2);
    writeFileSync(join(temp, "padded.wav"), wavFile(Buffer.concat([lead, speech, tail]), 16000));
    const speechSeconds = speech.length / 32000;
    return {
      path: "padded.wav",
      text: utterance.text,
      speechStart: leadSeconds,
      speechEnd: leadSeconds + speechSeconds,
      seconds: leadSeconds + speechSeconds + tailSeconds,
    };
  });
  return { ...index, path: join(dir, index.path) };
}
