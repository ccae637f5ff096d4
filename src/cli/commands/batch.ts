/** `kiln batch <requests.jsonl>`: a file of API requests answered offline, as the Batch API answers them, without a server. */
import { readFile, writeFile } from "node:fs/promises";
import { basename } from "node:path";
import type { FastifyInstance } from "fastify";
import { defineCommand, type CommandIO } from "../command.js";
import { chooseDevice, describeDevice, deviceOption } from "../device-option.js";
import { option, UsageError } from "../options.js";

const FINAL = new Set(["completed", "failed", "cancelled", "expired"]);

/** Milliseconds between progress lines on a stream that is not a terminal. */
const PROGRESS_LINE_MS = 5_000;

export default defineCommand({
  name: "batch",
  description: "Answer a file of API requests offline, as the Batch API does",
  intro: `Reads a Batch API input file (JSON Lines, one request a line:
{"custom_id": "...", "method": "POST", "url": "/v1/chat/completions", "body": {...}}, every url the
same one of /v1/chat/completions, /v1/completions, /v1/embeddings and /v1/responses), loads the
models the requests name (pulling and compiling them if needed), answers every request through the
same routes and engine as \`kiln serve\`, --max-running at a time, and writes one line per request,
in the file's order: {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"},
as the Batch API's output and error files hold them, to --output (default stdout). Progress goes to
stderr; Ctrl-C stops starting requests, and what was answered is written. A file with a bad line
answers nothing: each problem is listed with its line, and the exit code is 1. A request the
endpoint refuses (a 4xx) is a line with its error, and does not change the exit code.`,
  positionals: "<requests.jsonl>",
  options: {
    output: option.string({ short: "o", value: "<file>", description: "where the answers go (one JSON line per request); default stdout" }),
    maxRunning: option.integer({ min: 1, max: 256, default: 16, description: "requests answered at once, each model's KV slots" }),
    threads: option.integer({ min: 1, max: 256, default: 2, description: "ONNX Runtime threads per model" }),
    device: deviceOption,
  },
  async run({ options, positionals, given }, io) {
    const [input] = positionals;
    if (!input || positionals.length > 1) throw new UsageError("needs one input file (JSON Lines: one request a line)");
    const content = await readFile(input).catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(`cannot read ${input}: ${err.code === "ENOENT" ? "no such file" : err.message}`);
    });
    const requests = requestsOf(content);
    if (requests.endpoint === null) throw new UsageError(`${input} holds no request with a url`);
    // Loaded here, not with the command's declaration, so that help and usage errors come at once.
    const [{ buildApp }, { loadModel }, { ModelRegistry }, { resolveModelId }] = await Promise.all([
      import("../../api/app.js"),
      import("../../provision/index.js"),
      import("../../scheduler/index.js"),
      import("../../catalogue/aliases.js"),
    ]);
    const device = await chooseDevice("batch", options.device, io);
    const registry = new ModelRegistry();
    let app: FastifyInstance | null = null;
    const stop = new AbortController();
    const onSignal = () => stop.abort();
    process.once("SIGINT", onSignal);
    try {
      for (const id of requests.models) {
        const slug = resolveModelId(id);
        // A model no catalogue spelling names is left to the route, which answers its requests 404.
        if (!slug || registry.get(slug)) continue;
        io.stderr.write(`kiln batch: ${slug} on ${describeDevice(device)}\n`);
        registry.serve(
          await loadModel(slug, {
            threads: given.has("threads") ? options.threads : undefined,
            maxRunning: options.maxRunning,
            session: { device: device.device },
            adapterMemory: device.adapter?.memory,
            onStage: (s) => io.stderr.write(`${slug}: ${s}\n`),
          }),
        );
      }
      app = await buildApp({ models: registry, batchConcurrency: options.maxRunning });
      const batch = await runBatch(app, content, basename(input), requests.endpoint, stop.signal, io);
      if (batch.status === "failed") {
        for (const e of (batch.errors as { data: BatchError[] }).data) io.stderr.write(`kiln batch: ${input}${e.line ? `:${e.line}` : ""}: ${e.message}\n`);
        return 1;
      }
      const lines = [...(await fileLines(app, batch.output_file_id)), ...(await fileLines(app, batch.error_file_id))];
      const answers = lines.map((l) => ({ line: JSON.parse(l) as { custom_id: string }, text: l }));
      answers.sort((a, b) => requests.order.get(a.line.custom_id)! - requests.order.get(b.line.custom_id)!);
      const out = answers.map((a) => a.text + "\n").join("");
      if (options.output) await writeFile(options.output, out);
      else io.stdout.write(out);
      const counts = batch.request_counts as { total: number; completed: number; failed: number };
      io.stderr.write(`kiln batch: ${batch.status}: ${counts.completed} answered, ${counts.failed} failed, of ${counts.total}\n`);
      return 0;
    } catch (err) {
      io.stderr.write(`kiln batch: ${err instanceof Error ? err.message : String(err)}\n`);
      return 1;
    } finally {
      process.off("SIGINT", onSignal);
      await app?.close();
      for (const state of registry.all()) if (state.status === "serving") await state.model.close();
    }
  },
});

interface BatchError {
  message: string;
  line: number | null;
}

/** What the file asks of this command: its endpoint (the first url), the models its requests name, and each custom_id's place. */
function requestsOf(content: Buffer): { endpoint: string | null; models: Set<string>; order: Map<string, number> } {
  let endpoint: string | null = null;
  const models = new Set<string>();
  const order = new Map<string, number>();
  for (const [i, row] of content.toString("utf8").split("\n").entries()) {
    let line: { url?: unknown; custom_id?: unknown; body?: { model?: unknown } };
    try {
      line = JSON.parse(row) as typeof line;
    } catch {
      continue; // the batch's own check reports it, with its line
    }
    if (endpoint === null && typeof line?.url === "string") endpoint = line.url;
    if (typeof line?.body?.model === "string") models.add(line.body.model);
    if (typeof line?.custom_id === "string" && !order.has(line.custom_id)) order.set(line.custom_id, i);
  }
  return { endpoint, models, order };
}

/** The batch made from `content` and run to its end (cancelled on `stop`), with progress on stderr. */
async function runBatch(
  app: FastifyInstance,
  content: Buffer,
  filename: string,
  endpoint: string,
  stop: AbortSignal,
  io: CommandIO,
): Promise<Record<string, unknown>> {
  const boundary = "kilnbatch";
  const form = Buffer.concat([
    Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`),
    Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="${filename.replace(/"/g, "")}"\r\n\r\n`),
    content,
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  const file = await call(app, "POST", "/v1/files", form, `multipart/form-data; boundary=${boundary}`);
  let batch = await call(app, "POST", "/v1/batches", JSON.stringify({ input_file_id: file.id, endpoint, completion_window: "24h" }), "application/json");
  let cancelled = false;
  let lastLine = 0;
  while (!FINAL.has(String(batch.status))) {
    await new Promise((r) => setTimeout(r, 200));
    if (stop.aborted && !cancelled) {
      cancelled = true;
      io.stderr.write("\nkiln batch: stopping: no more requests start; the answered ones are written\n");
      await call(app, "POST", `/v1/batches/${batch.id}/cancel`);
    }
    batch = await call(app, "GET", `/v1/batches/${batch.id}`);
    const counts = batch.request_counts as { total: number; completed: number; failed: number };
    if (counts.total === 0) continue;
    const progress = `kiln batch: ${counts.completed + counts.failed}/${counts.total} answered`;
    if (io.stderr.isTTY) io.stderr.write(`\r${progress}`);
    else if (Date.now() - lastLine >= PROGRESS_LINE_MS) {
      lastLine = Date.now();
      io.stderr.write(`${progress}\n`);
    }
  }
  if (io.stderr.isTTY) io.stderr.write("\n");
  return batch;
}

/** One request to the app; its JSON answer, or an error naming what the app said. */
async function call(
  app: FastifyInstance,
  method: "GET" | "POST",
  url: string,
  payload?: string | Buffer,
  contentType?: string,
): Promise<Record<string, unknown>> {
  const res = await app.inject({ method, url, ...(payload !== undefined ? { payload, headers: { "content-type": contentType! } } : {}) });
  const body = res.json() as Record<string, unknown> & { error?: { message: string } };
  if (res.statusCode !== 200) throw new Error(body.error?.message ?? `${method} ${url} answered ${res.statusCode}`);
  return body;
}

/** The lines of a batch's output or error file (none when it has no such file). */
async function fileLines(app: FastifyInstance, fileId: unknown): Promise<string[]> {
  if (typeof fileId !== "string") return [];
  const res = await app.inject({ method: "GET", url: `/v1/files/${fileId}/content` });
  return res.body.split("\n").filter((l) => l !== "");
}
