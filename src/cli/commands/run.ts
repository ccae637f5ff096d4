/** `kiln run <slug> <prompt>`: one chat turn from the terminal, streamed as it is generated. */
import { checkLocalGguf, isLocalModelPath, loadLocalGguf, loadModel, type LoadModelOptions } from "../../provision/index.js";
import type { ServedModel } from "../../scheduler/index.js";
import { defineCommand } from "../command.js";
import { activationsOption, chooseDevice, describeDevice, deviceOption } from "../device-option.js";
import { option, UsageError } from "../options.js";

export default defineCommand({
  name: "run",
  description: "Generate a chat answer from the terminal",
  intro: `Pulls and compiles the model if needed, renders the prompt (the words after the slug, joined
by spaces) through the model's chat template and streams the answer to stdout, through the same
engine as \`kiln serve\` with one KV slot (and the model's promoted artifact, when it has one).
The model is a catalogue slug or a GGUF file on this machine (a path, relative to the current
directory: \`kiln run ./my-model.Q4_K_M.gguf "Hello"\`), given first or with --model.`,
  positionals: "<slug|file.gguf> <prompt>...",
  options: {
    model: option.string({ short: "m", value: "<slug|file.gguf>", description: "the model, instead of the first word: a catalogue slug or a GGUF file" }),
    system: option.string({ value: "<text>", description: "system message (the template's default when absent)" }),
    maxTokens: option.integer({ min: 1, default: 256, description: "most tokens to generate" }),
    temperature: option.number({ min: 0, max: 2, default: 0.7, description: "sampling temperature; 0 is greedy" }),
    seed: option.integer({ description: "sampling seed, for reproducible output; a random one when absent" }),
    threads: option.integer({ min: 1, max: 256, default: 2, description: "ONNX Runtime threads" }),
    device: deviceOption,
    activations: activationsOption,
  },
  async run({ options, positionals, given }, io) {
    const [slug, ...promptWords] = options.model !== undefined ? [options.model, ...positionals] : positionals;
    if (!slug || promptWords.length === 0) throw new UsageError("needs a model (a slug or a GGUF file) and a prompt");
    let model: ServedModel | null = null;
    try {
      // The same path as `kiln serve`: one KV slot, the batch engine, the model's chat template.
      // A promoted artifact's thread count stands in for the default, not for a --threads given.
      const threads = given.has("threads") ? options.threads : undefined;
      // A file kiln cannot serve is refused before anything else is said or probed.
      const local = isLocalModelPath(slug) ? await checkLocalGguf(slug) : null;
      const device = await chooseDevice("run", options.device, io);
      io.stderr.write(`${slug}: on ${describeDevice(device)}\n`);
      const load: LoadModelOptions = {
        threads,
        maxRunning: 1,
        session: { device: device.device },
        deviceActivations: options.activations,
        adapterMemory: device.adapter?.memory,
        onStage: (s) => io.stderr.write(`${slug}: ${s}\n`),
      };
      model = local ? await loadLocalGguf(local, load) : await loadModel(slug, load);
      const messages = [...(options.system ? [{ role: "system", content: options.system }] : []), { role: "user", content: promptWords.join(" ") }];
      const sampling = { temperature: options.temperature, seed: options.seed };
      const stream = model.engine.submit({ promptIds: model.chatPrompt(messages), maxTokens: options.maxTokens, sampling });
      for await (const event of stream) if (event.type === "delta") io.stdout.write(event.text);
      io.stdout.write("\n");
      return 0;
    } catch (err) {
      io.stderr.write(`kiln run: ${err instanceof Error ? err.message : String(err)}\n`);
      return 1;
    } finally {
      await model?.close();
    }
  },
});
