/** `kiln bench <slug>`: the model's speed on this machine through the engine (or speech worker) `kiln serve` runs. */
import { getModel, hasModel } from "../../catalogue/catalogue.js";
import type { LoadModelOptions } from "../../provision/index.js";
import type { LoadedSpeechModel } from "../../runtime/loaded-speech-model.js";
import type { ServedModel } from "../../scheduler/index.js";
import { measureThroughput, type ThroughputFigures, type ThroughputPlan } from "../../scheduler/serving/throughput.js";
import { measureSpeechThroughput, type SpeechThroughputFigures, type SpeechThroughputPlan, windowSeconds } from "../../scheduler/speech/throughput.js";
import { type CommandIO, defineCommand } from "../command.js";
import type { DeviceDecision } from "../../runtime/device/choose.js";
import { activationsOption, chooseDevice, describeDevice, deviceOption } from "../device-option.js";
import { option, UsageError } from "../options.js";

/** Prompt tokens each decoding sequence starts from. */
const DECODE_CONTEXT = 64;

/** Prompt tokens each speech decoder row starts from (Whisper's task tokens and a few of text). */
const SPEECH_CONTEXT = 8;

/** "1,16,64" → [1, 16, 64]: whole numbers of sequences, at least 1 each. */
export function parseRows(text: string): number[] {
  const rows = text.split(",").map((s) => s.trim());
  if (rows.some((r) => !/^[1-9][0-9]*$/.test(r)))
    throw new UsageError(`--rows takes whole numbers of sequences separated by commas (e.g. 1,16,64), not "${text}"`);
  return [...new Set(rows.map(Number))];
}

/** The figures as the text table the command prints. */
export function formatThroughput(figures: ThroughputFigures, plan: ThroughputPlan): string {
  const lines = [
    `prompt of ${figures.prompt.tokens} tokens: first token after ${figures.prompt.ttftMs.toFixed(0)} ms (${figures.prompt.tokensPerSecond.toFixed(0)} prompt tokens/s)`,
    `decode, ${plan.steps} tokens a sequence after a ${plan.decodeContext ?? 64}-token prompt:`,
  ];
  const header = ["sequences", "ms/step", "tokens/s", "steps"];
  const cells = figures.decode.map((d) => [
    String(d.rows),
    d.samples > 0 ? d.msPerStep.toFixed(1) : "-",
    d.samples > 0 ? d.tokensPerSecond.toFixed(1) : "-",
    String(d.samples),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  for (const row of [header, ...cells]) lines.push(`  ${row.map((c, i) => c.padStart(widths[i])).join("  ")}`);
  return lines.join("\n");
}

/** `kiln bench <text model>`: the engine's time to first token and decode steps. */
async function benchText(
  slug: string,
  load: () => Promise<ServedModel>,
  device: DeviceDecision,
  plan: ThroughputPlan,
  json: boolean,
  io: CommandIO,
): Promise<number> {
  const model = await load();
  try {
    const longest = Math.max(plan.promptTokens + 1, DECODE_CONTEXT + plan.steps);
    if (longest > model.contextLength)
      throw new UsageError(
        `${slug} serves ${model.contextLength} tokens per sequence here; --prompt ${plan.promptTokens} and --steps ${plan.steps} need ${longest}`,
      );
    io.stderr.write(`${slug}: measuring on ${describeDevice(device)}, artifact ${model.artifactId}, ${plan.runs} run(s)\n`);
    const figures = await measureThroughput(model, plan);
    if (json) io.stdout.write(`${JSON.stringify({ model: slug, artifact: model.artifactId, device: device.device, plan, ...figures }, null, 2)}\n`);
    else io.stdout.write(`${slug} on ${describeDevice(device)} (artifact ${model.artifactId})\n${formatThroughput(figures, plan)}\n`);
    return 0;
  } finally {
    await model.close();
  }
}

/** The speech figures as the text table the command prints. */
export function formatSpeechThroughput(figures: SpeechThroughputFigures, plan: SpeechThroughputPlan): string {
  const lines = [
    `encode a 30 s window: ${figures.encodeMs.toFixed(0)} ms`,
    `beam search (${plan.beams} beams), ${plan.steps} decoder steps after a ${plan.context}-token prompt; a window: the encode, the prompt and 100 steps:`,
  ];
  const header = ["transcriptions", "rows", "prompt ms", "ms/step", "window s", "audio s/s"];
  const cells = figures.decode.map((d) => {
    const window = windowSeconds(figures.encodeMs, d);
    return [
      String(d.transcriptions),
      String(d.rows),
      d.promptMs.toFixed(1),
      d.msPerStep.toFixed(1),
      window.toFixed(2),
      ((30 * d.transcriptions) / window).toFixed(1),
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  for (const row of [header, ...cells]) lines.push(`  ${row.map((c, i) => c.padStart(widths[i])).join("  ")}`);
  return lines.join("\n");
}

/** What the speech measurement takes from the command's options. */
interface SpeechBenchOptions {
  rows: number[];
  beams: number;
  steps: number;
  runs: number;
  threads?: number;
  activations?: "float32" | "float16";
  json: boolean;
}

/** `kiln bench <whisper slug>`: the speech worker's encode and beam-search decoder calls. */
async function benchSpeech(slug: string, device: DeviceDecision, o: SpeechBenchOptions, io: CommandIO): Promise<number> {
  const plan: SpeechThroughputPlan = { transcriptions: o.rows, beams: o.beams, context: SPEECH_CONTEXT, steps: o.steps, runs: o.runs };
  let model: LoadedSpeechModel | null = null;
  const { loadSpeechWorker } = await import("../../provision/index.js");
  try {
    model = await loadSpeechWorker(slug, {
      device: device.device,
      threads: o.threads,
      deviceActivations: o.activations,
      maxRunning: Math.max(...o.rows),
      beamSize: o.beams,
      adapterMemory: device.adapter?.memory,
      onStage: (s) => io.stderr.write(`${slug}: ${s}\n`),
    });
    const room = model.manifest.speech.textContext - SPEECH_CONTEXT - 1;
    if (o.steps > room) throw new UsageError(`${slug} decodes ${model.manifest.speech.textContext} tokens a window; --steps ${o.steps} needs at most ${room}`);
    const artifact = model.manifest.id;
    io.stderr.write(`${slug}: measuring on ${describeDevice(device)}, artifact ${artifact}, ${plan.runs} run(s)\n`);
    const figures = await measureSpeechThroughput(model, plan);
    if (o.json) io.stdout.write(`${JSON.stringify({ model: slug, artifact, device: device.device, plan, ...figures }, null, 2)}\n`);
    else io.stdout.write(`${slug} on ${describeDevice(device)} (artifact ${artifact})\n${formatSpeechThroughput(figures, plan)}\n`);
    return 0;
  } finally {
    await model?.close();
  }
}

export default defineCommand({
  name: "bench",
  description: "Measure a model's speed on this machine",
  intro: `Loads the model as \`kiln serve\` does (the same engine, worker and device; prefix reuse off)
and measures, through the engine, the time to the first token of a prompt of --prompt tokens, then
the decode step with each number of --rows sequences decoding together: the median milliseconds of
a step in which exactly that many sequences decode and no prompt is computed, and the tokens per
second it makes. Every measurement runs --runs times after one unrecorded warm-up round (a first
call of each shape compiles kernels); the figures are medians. The model's end tokens are kept out,
so every sequence decodes --steps tokens. The model is a catalogue slug or a GGUF file on this
machine, given first or with --model.

For a transcription model (Whisper) it measures through the speech worker \`kiln serve\` runs: the
encode of one 30 s window, then beam search's decoder calls with --rows transcriptions decoding
together, --beams rows each (a prompt of 8 tokens, then --steps steps of one token a row, the
beams reordered every step, each row's likeliest tokens under Whisper's rules), and what a window
of about 100 tokens of speech takes: the encode, the prompt and 100 steps, and the seconds of audio
that makes a second. --prompt is for text models.`,
  positionals: "<slug|file.gguf>",
  options: {
    model: option.string({ short: "m", value: "<slug|file.gguf>", description: "the model, instead of the first word: a catalogue slug or a GGUF file" }),
    prompt: option.integer({ min: 1, default: 512, description: "prompt tokens of the time-to-first-token measurement" }),
    rows: option.string({
      value: "N,N...",
      default: "1,4",
      description: "numbers of sequences (of a transcription model: transcriptions) decoding together, one decode measurement each",
    }),
    beams: option.integer({ min: 1, max: 16, default: 5, description: "a transcription model's beams: decoder rows per transcription" }),
    steps: option.integer({ min: 2, default: 32, description: "tokens each sequence decodes in a decode measurement" }),
    runs: option.integer({ min: 1, default: 3, description: "repetitions of every measurement (the figures are medians)" }),
    threads: option.integer({ min: 1, max: 256, default: 2, description: "ONNX Runtime threads" }),
    device: deviceOption,
    activations: activationsOption,
    json: option.flag({ description: "print the figures as JSON" }),
  },
  async run({ options, positionals, given }, io) {
    const slug = options.model ?? positionals[0];
    if (!slug || positionals.length > (options.model !== undefined ? 0 : 1)) throw new UsageError("needs one model: a slug or a GGUF file");
    const rows = parseRows(options.rows);
    // Loaded here, not with the command's declaration, so that help and usage errors come at once.
    const { checkLocalGguf, isLocalModelPath, loadLocalGguf, loadModel } = await import("../../provision/index.js");
    const speech = !isLocalModelPath(slug) && hasModel(slug) && getModel(slug).kind === "transcription";
    if (speech && given.has("prompt")) throw new UsageError("--prompt is for text models: a transcription model's prompt is its task tokens");
    const threads = given.has("threads") ? options.threads : undefined;
    try {
      const local = isLocalModelPath(slug) ? await checkLocalGguf(slug) : null;
      const device = await chooseDevice("bench", options.device, io);
      if (speech) {
        const o = { rows, beams: options.beams, steps: options.steps, runs: options.runs, threads, activations: options.activations, json: options.json };
        return await benchSpeech(slug, device, o, io);
      }
      const plan: ThroughputPlan = { promptTokens: options.prompt, rows, steps: options.steps, runs: options.runs, decodeContext: DECODE_CONTEXT };
      const load: LoadModelOptions = {
        threads,
        maxRunning: Math.max(...rows),
        prefixReuse: "off",
        session: { device: device.device },
        deviceActivations: options.activations,
        adapterMemory: device.adapter?.memory,
        onStage: (s) => io.stderr.write(`${slug}: ${s}\n`),
      };
      return await benchText(slug, local ? () => loadLocalGguf(local, load) : () => loadModel(slug, load), device, plan, options.json, io);
    } catch (err) {
      if (err instanceof UsageError) throw err;
      io.stderr.write(`kiln bench: ${err instanceof Error ? err.message : String(err)}\n`);
      return 1;
    }
  },
});
