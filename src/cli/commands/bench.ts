/** `kiln bench <slug>`: the model's speed on this machine through the engine `kiln serve` runs. */
import { checkLocalGguf, isLocalModelPath, loadLocalGguf, loadModel, type LoadModelOptions } from "../../provision/index.js";
import { measureThroughput, type ServedModel, type ThroughputFigures, type ThroughputPlan } from "../../scheduler/index.js";
import { defineCommand } from "../command.js";
import { activationsOption, chooseDevice, describeDevice, deviceOption } from "../device-option.js";
import { option, UsageError } from "../options.js";

/** Prompt tokens each decoding sequence starts from. */
const DECODE_CONTEXT = 64;

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
machine, given first or with --model.`,
  positionals: "<slug|file.gguf>",
  options: {
    model: option.string({ short: "m", value: "<slug|file.gguf>", description: "the model, instead of the first word: a catalogue slug or a GGUF file" }),
    prompt: option.integer({ min: 1, default: 512, description: "prompt tokens of the time-to-first-token measurement" }),
    rows: option.string({ value: "N,N...", default: "1,4", description: "numbers of sequences decoding together, one decode measurement each" }),
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
    const plan: ThroughputPlan = { promptTokens: options.prompt, rows, steps: options.steps, runs: options.runs, decodeContext: DECODE_CONTEXT };
    let model: ServedModel | null = null;
    try {
      const local = isLocalModelPath(slug) ? await checkLocalGguf(slug) : null;
      const device = await chooseDevice("bench", options.device, io);
      const load: LoadModelOptions = {
        threads: given.has("threads") ? options.threads : undefined,
        maxRunning: Math.max(...rows),
        prefixReuse: "off",
        session: { device: device.device },
        deviceActivations: options.activations,
        adapterMemory: device.adapter?.memory,
        onStage: (s) => io.stderr.write(`${slug}: ${s}\n`),
      };
      model = local ? await loadLocalGguf(local, load) : await loadModel(slug, load);
      const longest = Math.max(plan.promptTokens + 1, DECODE_CONTEXT + plan.steps);
      if (longest > model.contextLength)
        throw new UsageError(
          `${slug} serves ${model.contextLength} tokens per sequence here; --prompt ${plan.promptTokens} and --steps ${plan.steps} need ${longest}`,
        );
      io.stderr.write(`${slug}: measuring on ${describeDevice(device)}, artifact ${model.artifactId}, ${plan.runs} run(s)\n`);
      const figures = await measureThroughput(model, plan);
      if (options.json) {
        io.stdout.write(`${JSON.stringify({ model: slug, artifact: model.artifactId, device: device.device, plan, ...figures }, null, 2)}\n`);
      } else {
        io.stdout.write(`${slug} on ${describeDevice(device)} (artifact ${model.artifactId})\n${formatThroughput(figures, plan)}\n`);
      }
      return 0;
    } catch (err) {
      if (err instanceof UsageError) throw err;
      io.stderr.write(`kiln bench: ${err instanceof Error ? err.message : String(err)}\n`);
      return 1;
    } finally {
      await model?.close();
    }
  },
});
