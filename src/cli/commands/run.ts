/** `kiln run <slug> [prompt]`: one chat turn from the terminal, or a conversation, streamed as it is generated; a speech model's transcript of a file. */
import { RESPONSE_FORMATS as TRANSCRIPT_FORMATS } from "../../api/protocol/response-formats.js";
import { getModel, hasModel } from "../../catalogue/catalogue.js";
import type { LoadModelOptions } from "../../provision/index.js";
import { promptOpensThinking, thinkingBudget, type ChatMessage, type FinishEvent, type ServedModel } from "../../scheduler/index.js";
import { ThinkingPrinter } from "../thinking-printer.js";
import { CHAT_COMMANDS, chatSession } from "../chat-session.js";
import { chatTemplateFileOption, chatTemplateFrom } from "../chat-template-option.js";
import { type CommandIO, defineCommand } from "../command.js";
import { activationsOption, chooseDevice, describeDevice, deviceOption } from "../device-option.js";
import { draftTokensOption } from "../draft-tokens-option.js";
import { thinkingBudgetOption } from "../thinking-budget-option.js";
import { option, UsageError } from "../options.js";
import type { TranscribeFileOptions } from "../transcribe-file.js";

export default defineCommand({
  name: "run",
  description: "Generate a chat answer from the terminal, hold a conversation, or transcribe a file",
  intro: `Pulls and compiles the model if needed, renders the prompt (the words after the slug, joined
by spaces) through the model's chat template and streams the answer to stdout, through the same
engine as \`kiln serve\` with one KV slot (and the model's promoted artifact, when it has one).
Without prompt words, the prompt is read from stdin when it is a pipe or a file (\`kiln run
smollm2-135m-instruct < question.txt\`); at a terminal, kiln holds a conversation instead: each
line is a turn and the turns so far go with the next one (the oldest forgotten when they no
longer fit the model's context; the last turn's cache, its answer included, is reused, so a turn
computes only what was typed since: as \`kiln serve --prefix-reuse any\` would answer them), and
${CHAT_COMMANDS}
The model is a catalogue slug or a GGUF file on this machine (a path, relative to the current
directory: \`kiln run ./my-model.Q4_K_M.gguf "Hello"\`), given first or with --model.
A speech model transcribes the audio file named after it instead (any format ffmpeg reads, or the
file on stdin), printing each segment as its 30 s window is decoded: \`kiln run whisper-tiny-en
meeting.mp3\`; --temperature is then Whisper's starting temperature (0 to 1, default 0).`,
  positionals: ["<slug|file.gguf> [prompt...]", "<speech slug> [audio file]"],
  options: {
    model: option.string({ short: "m", value: "<slug|file.gguf>", description: "the model, instead of the first word: a catalogue slug or a GGUF file" }),
    system: option.string({ value: "<text>", description: "system message (the template's default when absent)" }),
    maxTokens: option.integer({ min: 1, default: 256, description: "most tokens to generate, per answer" }),
    temperature: option.number({ min: 0, max: 2, default: 0.7, description: "sampling temperature; 0 is greedy" }),
    seed: option.integer({ description: "sampling seed, for reproducible output; a random one when absent" }),
    format: option.choice(["lines", ...TRANSCRIPT_FORMATS], {
      default: "lines",
      description:
        "a speech model's output: lines (a segment a line, as each window is decoded), or the HTTP API's answer for that response_format (text, json, verbose_json, srt or vtt subtitles) once the file is done",
    }),
    verbose: option.flag({ description: "after each answer, its prompt and answer tokens and their speed, on stderr" }),
    chatTemplateFile: chatTemplateFileOption("a text model"),
    hideThinking: option.flag({
      description:
        "do not print a reasoning model's thinking (by default it goes to stderr, between 'Thinking...' and '...done thinking.', and the answer alone to stdout)",
    }),
    threads: option.integer({ min: 1, max: 256, default: 2, description: "ONNX Runtime threads" }),
    device: deviceOption,
    draftTokens: draftTokensOption,
    thinkingBudget: thinkingBudgetOption,
    activations: activationsOption,
  },
  async run({ options, positionals, given }, io) {
    const [slug, ...promptWords] = options.model !== undefined ? [options.model, ...positionals] : positionals;
    if (!slug) throw new UsageError("needs a model (a slug or a GGUF file)");
    if (hasModel(slug) && getModel(slug).kind === "transcription") {
      if (promptWords.length > 1) throw new UsageError("a speech model transcribes one audio file at a time");
      const temperature = given.has("temperature") ? options.temperature : undefined;
      const { threads, device, activations: deviceActivations, format } = options;
      return transcribe(slug, promptWords[0], { threads, temperature, device, deviceActivations, format }, io);
    }
    if (given.has("format")) throw new UsageError("--format is for a speech model; a text model's answer streams as it is generated");
    const conversation = promptWords.length === 0 && io.stdin?.isTTY === true;
    const prompt = promptWords.length > 0 || conversation ? promptWords.join(" ") : await promptFromStdin(io);
    const chatTemplate = await chatTemplateFrom(options.chatTemplateFile);
    // Loaded here, not with the command's declaration, so that help and usage errors come at once.
    const { checkLocalGguf, isLocalModelPath, loadLocalGguf, loadModel } = await import("../../provision/index.js");
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
        chatTemplate,
        draftTokens: options.draftTokens,
        thinkingBudget: options.thinkingBudget,
        // Each turn resends the conversation: the last turn's cache, its answer included, is reused
        // whole, so a turn computes only what was typed since (llama.cpp's and Ollama's chats do so).
        ...(conversation ? { prefixReuse: "any" as const } : {}),
      };
      model = local ? await loadLocalGguf(local, load) : await loadModel(slug, load);
      const sampling = { temperature: options.temperature, seed: options.seed };
      const answer = answerer(model, { maxTokens: options.maxTokens, sampling }, options.verbose ? io.stderr : null, options.hideThinking ? null : io.stderr);
      if (conversation) {
        io.stderr.write(`${slug}: ready (/? for help)\n`);
        await chatSession({ input: io.stdin!, output: io.stdout, notes: io.stderr, terminal: true, system: options.system, ...answer });
        return 0;
      }
      const messages: ChatMessage[] = [...(options.system ? [{ role: "system", content: options.system }] : []), { role: "user", content: prompt }];
      await answer.reply(messages, new AbortController().signal, (text) => io.stdout.write(text));
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

/** All of stdin as the prompt (a pipe or a file); a usage error when there is none. */
async function promptFromStdin(io: CommandIO): Promise<string> {
  let text = "";
  if (io.stdin) {
    io.stdin.setEncoding("utf8");
    for await (const chunk of io.stdin) text += chunk as string;
  }
  text = text.trim();
  if (text === "") throw new UsageError("needs a prompt: the words after the model, or text on stdin (at a terminal, a conversation)");
  return text;
}

/**
 * How a loaded model answers a conversation, and whether one leaves it room to; with `stats`, each
 * answer's figures are written there. A reasoning model's thinking goes to `thinking` (or nowhere),
 * and only its answer is written and kept in the conversation.
 */
function answerer(
  model: ServedModel,
  request: { maxTokens: number; sampling: { temperature: number; seed?: number } },
  stats: CommandIO["stderr"] | null,
  thinking: CommandIO["stderr"] | null,
) {
  return {
    /** Room for the whole answer where the context allows; else at least for the prompt, the answer cut at the context's end. */
    fits: (messages: readonly ChatMessage[]) => {
      const tokens = model.chatPrompt(messages).length;
      return tokens + Math.min(request.maxTokens, Math.floor(model.contextLength / 4)) <= model.contextLength;
    },
    reply: async (messages: readonly ChatMessage[], signal: AbortSignal, write: (text: string) => void) => {
      let text = "";
      const promptIds = model.chatPrompt(messages);
      const started = performance.now();
      let firstToken: number | null = null;
      const opened = model.reasoning ? promptOpensThinking(model.decode, promptIds) : false;
      const budget =
        model.reasoning && model.thinkingBudget !== undefined
          ? thinkingBudget(model.thinkingBudget, opened, (t) => model.textPrompt(t, false, "parse"))
          : undefined;
      const stream = model.engine.submit(
        { promptIds, maxTokens: request.maxTokens, sampling: request.sampling, ...(budget ? { thinkingBudget: budget } : {}) },
        signal,
      );
      const printer = model.reasoning ? new ThinkingPrinter(opened, thinking) : null;
      const answer = (piece: string) => {
        text += piece;
        write(piece);
      };
      for await (const event of stream) {
        if (event.type === "delta") {
          firstToken ??= performance.now();
          if (printer) printer.push(event.text, answer);
          else answer(event.text);
        } else if (event.type === "finish") {
          printer?.finish(answer);
          if (!stats) continue;
          // On its own lines where stdout and stderr share a terminal.
          const lineBreak = text === "" || text.endsWith("\n") ? "" : "\n";
          stats.write(lineBreak + answerStats(promptIds.length, event, firstToken === null ? null : (firstToken - started) / 1000));
        }
      }
      return text;
    },
  };
}

/**
 * One answer's figures, as `ollama run --verbose` gives them: the prompt (its time is the first
 * token's, prefill included) and the answer (first token to last).
 */
function answerStats(promptTokens: number, finish: FinishEvent, firstTokenSeconds: number | null): string {
  const rate = (tokens: number, seconds: number) => (seconds > 0 ? `, ${(tokens / seconds).toFixed(1)} tokens/s` : "");
  const computed = promptTokens - finish.cachedPromptTokens;
  const prompt =
    firstTokenSeconds === null
      ? `prompt: ${promptTokens} tokens (${finish.cachedPromptTokens} cached)`
      : `prompt: ${promptTokens} tokens (${finish.cachedPromptTokens} cached), first token after ${firstTokenSeconds.toFixed(3)} s${rate(computed, firstTokenSeconds)}`;
  const answer = `answer: ${finish.completionTokens} tokens in ${finish.decodeSeconds.toFixed(3)} s${rate(Math.max(0, finish.completionTokens - 1), finish.decodeSeconds)} (${finish.reason})`;
  return `${prompt}\n${answer}\n`;
}

/** The speech model's side of `kiln run`: a file's transcript; exit 1 (said on stderr) when it fails. */
async function transcribe(slug: string, path: string | undefined, options: TranscribeFileOptions, io: CommandIO): Promise<number> {
  try {
    const { transcribeFile } = await import("../transcribe-file.js");
    await transcribeFile(slug, path, options, io);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) throw err;
    io.stderr.write(`kiln run: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}
