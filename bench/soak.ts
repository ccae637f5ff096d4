/**
 * Soak run (a script, not a test): the real `kiln serve` process under many concurrent streaming
 * clients, half of whose requests are abandoned mid-stream and some of which read slowly, for a
 * long while; it reports errors, latencies and the server's memory over time.
 *
 *   npm run bench -- soak [--clients 256] [--seconds 600] [--abort-rate 0.5] [--slow-rate 0.25]
 *        [--slow-delay-ms 200] [--long-rate 0.1] [--max-tokens 128] [--model smollm2-135m-instruct]
 *        [--report-every 10] [--threads 2] [--max-running 16] [--max-waiting <clients>]
 *        [--kv-memory-mb N] [--grace 60] [--seed 1]
 *
 * Each of `--clients` clients runs a closed loop until `--seconds` have passed: one streaming chat
 * completion (`stream_options.include_usage`, `max_tokens` `--max-tokens`, temperature 0.8) after
 * another, on a prompt from the fixed chat prompt set, or with probability `--long-rate` a long one
 * (about a third of the served context, to make the KV cache grow). With probability
 * `--abort-rate` the client abandons the request: after a random number of content chunks
 * (0..max-tokens - 1), or, for one abandonment in five, after a random 0-5 s whatever the stream's
 * state (queued, before the headers, mid-stream). The first `--slow-rate` share of the clients read
 * slowly: the socket is paused for `--slow-delay-ms` after every chunk read, so TCP backpressure
 * reaches the server. The server is started with `--max-waiting` = the client count unless given,
 * so every client is admitted (a 503 `overloaded` is then counted as shed, not as an error).
 *
 * Every stream that is read to its end is checked: status 200 and `text/event-stream`, each event
 * one `data:` line of JSON (a `chat.completion.chunk`), the first delta carrying the role, exactly
 * one finish reason (`stop` or `length`, and `length` only at max_tokens), one usage chunk after
 * it, `[DONE]` last and nothing after it. Outcomes: completed, aborted (by the client, on purpose),
 * shed (503 overloaded), and errors by kind: `http <status>`, `malformed: <what>`,
 * `error event: <code>`, `network: <code>` (a connection dropped under a request the client had
 * not abandoned), `cut at end` (still running `--grace` seconds after the deadline; not an error).
 *
 * Every `--report-every` seconds one line: requests started / completed / aborted / shed / errors in
 * that window, content chunks per second streamed to every client (abandoned ones too), TTFT and E2E p50/p99 of the window's completed requests, the server's RSS (VmRSS of
 * its process, /proc/<pid>/status) and the running / waiting / paused sequence gauges of /metrics.
 * At the end: totals, error kinds with an example each, latencies over the whole run, the RSS
 * series (first, min, max, last report) and peak (VmHWM), and the server's exit code after SIGTERM.
 * Exit status 1 when any request got a malformed stream or an unexpected error (HTTP other than
 * 503 overloaded, an error event, a dropped connection) or the server did not stop cleanly; 0
 * otherwise. All traffic goes to 127.0.0.1; the run stops by itself (deadline + grace, and a hard
 * limit after that).
 */
import { Agent, request, type IncomingMessage } from "node:http";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { CHAT_PROMPTS } from "../test/support/model.js";
import { startServer, stopServer, type RunningServer } from "../test/support/server.js";

const { values: args } = parseArgs({
  options: {
    clients: { type: "string", default: "256" },
    seconds: { type: "string", default: "600" },
    "abort-rate": { type: "string", default: "0.5" },
    "slow-rate": { type: "string", default: "0.25" },
    "slow-delay-ms": { type: "string", default: "200" },
    "long-rate": { type: "string", default: "0.1" },
    "max-tokens": { type: "string", default: "128" },
    model: { type: "string", default: "smollm2-135m-instruct" },
    "report-every": { type: "string", default: "10" },
    threads: { type: "string", default: "2" },
    "max-running": { type: "string", default: "16" },
    "max-waiting": { type: "string" },
    "kv-memory-mb": { type: "string" },
    grace: { type: "string", default: "60" },
    seed: { type: "string", default: "1" },
  },
  allowPositionals: false,
});

function num(name: string, v: string, min: number, max: number, integer = true): number {
  const n = Number(v);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min || n > max) {
    throw new Error(`--${name} must be ${integer ? "an integer" : "a number"} from ${min} to ${max}, not ${v}`);
  }
  return n;
}
const slug = args.model!;
const clients = num("clients", args.clients!, 1, 4096);
const seconds = num("seconds", args.seconds!, 1, 86_400, false);
const abortRate = num("abort-rate", args["abort-rate"]!, 0, 1, false);
const slowRate = num("slow-rate", args["slow-rate"]!, 0, 1, false);
const slowDelayMs = num("slow-delay-ms", args["slow-delay-ms"]!, 0, 60_000);
const longRate = num("long-rate", args["long-rate"]!, 0, 1, false);
const maxTokens = num("max-tokens", args["max-tokens"]!, 1, 100_000);
const reportEvery = num("report-every", args["report-every"]!, 1, 3600, false);
const threads = num("threads", args.threads!, 1, 256);
const maxRunning = num("max-running", args["max-running"]!, 1, 256);
const maxWaiting = args["max-waiting"] === undefined ? clients : num("max-waiting", args["max-waiting"], 0, 100_000);
const graceS = num("grace", args.grace!, 0, 3600, false);
let seed = num("seed", args.seed!, 0, 2 ** 32 - 1) >>> 0;

/** mulberry32: the run's one source of randomness, so a seed repeats a run's choices. */
function random(): number {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const now = () => performance.now();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const log = (s: string) => process.stderr.write(`${s}\n`);
function pct(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const r = (p / 100) * (s.length - 1);
  const lo = Math.floor(r);
  return s[lo] + (s[Math.ceil(r)] - s[lo]) * (r - lo);
}
const ms = (x: number) => (Number.isFinite(x) ? (x >= 10_000 ? `${(x / 1000).toFixed(1)}s` : `${Math.round(x)}ms`) : "-");
const mb = (bytes: number) => `${(bytes / 1e6).toFixed(0)} MB`;

/** VmRSS and VmHWM of a process, bytes (0 once it is gone). */
function rssOf(pid: number): { rss: number; hwm: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) * 1024;
    return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
  } catch {
    return { rss: 0, hwm: 0 };
  }
}

// ── outcomes ────────────────────────────────────────────────────────────────────────────────

type Outcome =
  | { kind: "completed"; ttft: number; e2e: number; tokens: number }
  | { kind: "aborted" }
  | { kind: "shed" }
  | { kind: "cut" }
  | { kind: "error"; what: string; detail: string };

class Tally {
  started = 0;
  completed = 0;
  aborted = 0;
  shed = 0;
  cut = 0;
  tokens = 0;
  /** Content chunks received, by every request (completed, abandoned or cut). */
  chunks = 0;
  ttft: number[] = [];
  e2e: number[] = [];
  errors = new Map<string, { count: number; example: string }>();
  get errorCount(): number {
    let n = 0;
    for (const e of this.errors.values()) n += e.count;
    return n;
  }
  add(o: Outcome): void {
    if (o.kind === "completed") {
      this.completed++;
      this.tokens += o.tokens;
      this.ttft.push(o.ttft);
      this.e2e.push(o.e2e);
    } else if (o.kind === "aborted") this.aborted++;
    else if (o.kind === "shed") this.shed++;
    else if (o.kind === "cut") this.cut++;
    else {
      const e = this.errors.get(o.what) ?? { count: 0, example: o.detail };
      e.count++;
      this.errors.set(o.what, e);
    }
  }
}
const total = new Tally();
let win = new Tally();
const record = (o: Outcome) => {
  total.add(o);
  win.add(o);
};

// ── one request ─────────────────────────────────────────────────────────────────────────────

let host = "127.0.0.1";
let port = 0;
let contextLength = 2048;
const agent = new Agent({ keepAlive: true, maxSockets: clients + 8 });
/** Requests in flight, so the end of the run can cut them. */
const inFlight = new Set<() => void>();

const LONG_TEXT = CHAT_PROMPTS.join(" ");
function promptFor(long: boolean): string {
  if (!long) return CHAT_PROMPTS[Math.floor(random() * CHAT_PROMPTS.length)];
  // About a third of the served context (4 characters a token, give or take), well within it.
  const chars = Math.min(24_000, Math.floor(contextLength / 3) * 3);
  let text = "Summarise the following notes in one sentence.\n";
  while (text.length < chars) text += `${LONG_TEXT} `;
  return text.slice(0, chars);
}

interface Plan {
  /** Abandon after this many content chunks (null: read to the end). */
  abortAfterChunks: number | null;
  /** Abandon after this many ms whatever the state (null: no timer). */
  abortAfterMs: number | null;
  slow: boolean;
  long: boolean;
}

function oneRequest(plan: Plan): Promise<Outcome> {
  const body = JSON.stringify({
    model: slug,
    messages: [{ role: "user", content: promptFor(plan.long) }],
    max_tokens: maxTokens,
    temperature: 0.8,
    stream: true,
    stream_options: { include_usage: true },
  });
  const t0 = now();
  return new Promise<Outcome>((resolve) => {
    let settled = false;
    let abandoned = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (o: Outcome) => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      inFlight.delete(cut);
      resolve(o);
    };
    const abandon = () => {
      abandoned = true;
      req.destroy();
      finish({ kind: "aborted" });
    };
    const cut = () => {
      abandoned = true;
      req.destroy();
      finish({ kind: "cut" });
    };
    inFlight.add(cut);
    const req = request(
      {
        host,
        port,
        path: "/v1/chat/completions",
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), authorization: "Bearer sk-soak" },
      },
      (res) => readStream(res, plan, t0, abandon, finish),
    );
    req.on("error", (err: NodeJS.ErrnoException) => {
      if (abandoned || settled) return;
      finish({ kind: "error", what: `network: ${err.code ?? err.message}`, detail: err.message });
    });
    if (plan.abortAfterMs !== null) timer = setTimeout(abandon, plan.abortAfterMs);
    req.end(body);
  });
}

function readStream(res: IncomingMessage, plan: Plan, t0: number, abandon: () => void, finish: (o: Outcome) => void): void {
  const status = res.statusCode ?? 0;
  if (status !== 200) {
    let text = "";
    res.setEncoding("utf8");
    res.on("data", (c: string) => (text += c.length < 2000 ? c : ""));
    res.on("end", () => {
      let code: string | null = null;
      try {
        code = JSON.parse(text)?.error?.code ?? null;
      } catch {
        /* not JSON */
      }
      if (status === 503 && code === "overloaded") finish({ kind: "shed" });
      else finish({ kind: "error", what: `http ${status}${code ? ` ${code}` : ""}`, detail: text.slice(0, 300) });
    });
    res.on("error", () => finish({ kind: "error", what: `http ${status}`, detail: "body cut" }));
    return;
  }
  const type = res.headers["content-type"] ?? "";
  if (!type.startsWith("text/event-stream")) {
    res.resume();
    finish({ kind: "error", what: "malformed: content-type", detail: type });
    return;
  }
  const malformed = (what: string, detail: string) => {
    res.destroy();
    finish({ kind: "error", what: `malformed: ${what}`, detail: detail.slice(0, 300) });
  };
  res.setEncoding("utf8");
  let buf = "";
  let chunks = 0; // content chunks
  let ttft = NaN;
  let sawRole = false;
  let finishReason: string | null = null;
  let usageTokens: number | null = null;
  let done = false;
  let broken = false;

  const onEvent = (event: string): void => {
    const lines = event.split("\n").filter((l) => l !== "" && !l.startsWith(":"));
    if (lines.length !== 1 || !lines[0].startsWith("data: ")) return malformed("event framing", event);
    const data = lines[0].slice(6);
    if (done) return malformed("data after [DONE]", data);
    if (data === "[DONE]") {
      done = true;
      return;
    }
    let j: any;
    try {
      j = JSON.parse(data);
    } catch {
      return malformed("json", data);
    }
    if (j.error) {
      broken = true;
      res.destroy();
      finish({ kind: "error", what: `error event: ${j.error.code ?? j.error.type ?? "?"}`, detail: data.slice(0, 300) });
      return;
    }
    if (j.object !== "chat.completion.chunk") return malformed("object", data);
    if (j.usage) {
      if (finishReason === null) return malformed("usage before finish", data);
      if (usageTokens !== null) return malformed("second usage chunk", data);
      usageTokens = j.usage.completion_tokens;
      if (j.choices?.length) return malformed("usage chunk with choices", data);
      return;
    }
    const ch = j.choices?.[0];
    if (!ch || ch.index !== 0) return malformed("choice", data);
    if (finishReason !== null) return malformed("chunk after finish", data);
    if (!sawRole) {
      if (ch.delta?.role !== "assistant") return malformed("first delta without role", data);
      sawRole = true;
    }
    if (ch.delta?.content) {
      if (chunks === 0) ttft = now() - t0;
      chunks++;
      total.chunks++;
      win.chunks++;
      if (plan.abortAfterChunks !== null && chunks > plan.abortAfterChunks) {
        broken = true;
        abandon();
        return;
      }
    }
    if (ch.finish_reason) {
      if (ch.finish_reason !== "stop" && ch.finish_reason !== "length") return malformed("finish reason", data);
      finishReason = ch.finish_reason;
    }
  };

  res.on("data", (c: string) => {
    if (broken) return;
    buf += c;
    let k: number;
    while (!broken && (k = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, k);
      buf = buf.slice(k + 2);
      onEvent(event);
    }
    if (plan.slow && !broken && slowDelayMs > 0) {
      res.pause();
      setTimeout(() => res.resume(), slowDelayMs);
    }
  });
  res.on("end", () => {
    if (broken) return;
    const e2e = now() - t0;
    if (buf.trim() !== "") return malformed("trailing bytes", buf);
    if (!done) return malformed("no [DONE]", `finish ${finishReason}, ${chunks} chunks`);
    if (finishReason === null) return malformed("no finish reason", "");
    if (usageTokens === null) return malformed("no usage chunk", "");
    if (usageTokens < 1 || usageTokens > maxTokens) return malformed("usage", String(usageTokens));
    if (finishReason === "length" && usageTokens !== maxTokens) return malformed("length before max_tokens", String(usageTokens));
    if (chunks > usageTokens) return malformed("more content chunks than tokens", `${chunks} > ${usageTokens}`);
    finish({ kind: "completed", ttft: chunks > 0 ? ttft : e2e, e2e, tokens: usageTokens });
  });
  res.on("error", (err: NodeJS.ErrnoException) => {
    if (broken) return;
    finish({ kind: "error", what: `network: ${err.code ?? err.message}`, detail: `mid-stream after ${chunks} chunks: ${err.message}` });
  });
  res.on("aborted", () => {
    if (broken) return;
    finish({ kind: "error", what: "network: aborted by server", detail: `after ${chunks} chunks` });
  });
}

// ── clients, reports ────────────────────────────────────────────────────────────────────────

let deadline = Infinity;
async function client(index: number): Promise<void> {
  const slow = index < Math.round(slowRate * clients);
  await sleep(random() * 1000); // stagger the start over a second
  while (now() < deadline) {
    const abort = random() < abortRate;
    const byTimer = abort && random() < 0.2;
    const plan: Plan = {
      abortAfterChunks: abort && !byTimer ? Math.floor(random() * maxTokens) : null,
      abortAfterMs: byTimer ? random() * 5000 : null,
      slow,
      long: random() < longRate,
    };
    total.started++;
    win.started++;
    const o = await oneRequest(plan);
    record(o);
    if (o.kind === "shed") await sleep(500 + random() * 1000);
    else if (o.kind === "error" && o.what.startsWith("network")) await sleep(200);
  }
}

async function gauges(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  try {
    const res = await fetch(`http://${host}:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
    for (const line of (await res.text()).split("\n")) {
      for (const name of ["kiln_running_sequences", "kiln_waiting_sequences", "kiln_paused_sequences", "kiln_requests_cancelled_total"]) {
        if (line.startsWith(`${name}{`) && line.includes(`model="${slug}"`)) out[name] = (out[name] ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1));
      }
    }
  } catch {
    /* reported as "-" */
  }
  return out;
}

const rssSeries: Array<{ t: number; rss: number }> = [];
let serverPid = 0;
let tStart = 0;
async function report(): Promise<void> {
  const w = win;
  win = new Tally();
  const g = await gauges();
  const { rss } = rssOf(serverPid);
  const t = (now() - tStart) / 1000;
  rssSeries.push({ t, rss });
  const errs = [...w.errors.entries()].map(([k, v]) => `${k} x${v.count}`).join(", ");
  const gauge = (k: string) => (k in g ? String(g[k]) : "-");
  console.log(
    `[${t.toFixed(0).padStart(4)}s] started ${w.started} done ${w.completed} aborted ${w.aborted} shed ${w.shed} errors ${w.errorCount}${errs ? ` (${errs})` : ""}` +
      ` | ${(w.chunks / reportEvery).toFixed(0)} chunks/s | TTFT p50 ${ms(pct(w.ttft, 50))} p99 ${ms(pct(w.ttft, 99))} E2E p50 ${ms(pct(w.e2e, 50))} p99 ${ms(pct(w.e2e, 99))}` +
      ` | RSS ${mb(rss)} | running ${gauge("kiln_running_sequences")} waiting ${gauge("kiln_waiting_sequences")} paused ${gauge("kiln_paused_sequences")}`,
  );
}

// ── run ─────────────────────────────────────────────────────────────────────────────────────

const extra = ["--threads", String(threads), "--max-running", String(maxRunning), "--max-waiting", String(maxWaiting), "--host", "127.0.0.1"];
if (args["kv-memory-mb"] !== undefined) extra.push("--kv-memory-mb", String(num("kv-memory-mb", args["kv-memory-mb"], 1, 1_048_576)));
log(`soak: starting kiln serve --model ${slug} ${extra.join(" ")} ...`);
const startup = setTimeout(() => {
  log("soak: kiln serve was not ready within 15 minutes");
  process.exit(2);
}, 900_000);
let server: RunningServer;
try {
  server = await startServer(slug, extra);
} finally {
  clearTimeout(startup);
}
const url = new URL(server.baseURL);
if (url.hostname !== "127.0.0.1") {
  await stopServer(server);
  throw new Error(`kiln serve listens on ${server.baseURL}; the soak only targets 127.0.0.1`);
}
host = url.hostname;
port = Number(url.port);
serverPid = server.process.pid!;
for (const line of server.stderr().split("\n")) if (line.startsWith(`${slug}: serving`)) log(line);
try {
  const models = (await (await fetch(`${server.baseURL}/models/${slug}`, { headers: { authorization: "Bearer sk-soak" } })).json()) as {
    context_length?: number;
  };
  contextLength = models.context_length ?? contextLength;
} catch {
  /* keep the default */
}
let serverExited: number | null | "running" = "running";
server.process.once("exit", (code) => (serverExited = code));

// A hard stop, whatever happens: deadline, grace, the server's drain, and a margin.
const hardLimitS = seconds + graceS + 60;
setTimeout(() => {
  log(`soak: still running ${hardLimitS} s after the start; killing the server and exiting`);
  server.process.kill("SIGKILL");
  process.exit(3);
}, hardLimitS * 1000).unref();

console.log(
  `soak: ${clients} clients for ${seconds} s against ${server.baseURL} (pid ${serverPid}); abort rate ${abortRate}, slow readers ${Math.round(slowRate * clients)} (${slowDelayMs} ms per read), ` +
    `long prompts ${longRate}, max_tokens ${maxTokens}, served context ${contextLength}, --max-running ${maxRunning} --max-waiting ${maxWaiting}, seed ${args.seed}`,
);
tStart = now();
deadline = tStart + seconds * 1000;
const reporter = setInterval(() => void report(), reportEvery * 1000);
const running = Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
await sleep(seconds * 1000);
log(`soak: deadline; waiting up to ${graceS} s for ${inFlight.size} requests in flight`);
const graceTimer = setTimeout(() => {
  if (inFlight.size) log(`soak: cutting ${inFlight.size} requests still in flight`);
  for (const cut of [...inFlight]) cut();
}, graceS * 1000);
await running;
clearTimeout(graceTimer);
clearInterval(reporter);
await report();
const peak = rssOf(serverPid).hwm;
const died = serverExited !== "running";
const stopCode = died ? serverExited : await stopServer(server, 60_000);
agent.destroy();

// ── summary ─────────────────────────────────────────────────────────────────────────────────

const wallS = (now() - tStart) / 1000;
const t = total;
const lines: string[] = [];
lines.push("", `soak summary: ${slug}, ${clients} clients, ${wallS.toFixed(0)} s`);
lines.push(
  `requests: ${t.started} started, ${t.completed} completed, ${t.aborted} aborted by the client, ${t.shed} shed (503 overloaded), ${t.cut} cut at the end, ${t.errorCount} errors`,
);
lines.push(
  `throughput: ${(t.completed / wallS).toFixed(2)} completed req/s, ${(t.tokens / wallS).toFixed(1)} output tok/s of completed requests, ${(t.chunks / wallS).toFixed(1)} content chunks/s streamed to all`,
);
lines.push(
  `latency of completed requests: TTFT p50 ${ms(pct(t.ttft, 50))} p99 ${ms(pct(t.ttft, 99))}; E2E p50 ${ms(pct(t.e2e, 50))} p99 ${ms(pct(t.e2e, 99))}`,
);
for (const [what, e] of t.errors) lines.push(`  error ${what}: ${e.count}, e.g. ${e.example}`);
if (rssSeries.length) {
  const rs = rssSeries.map((r) => r.rss).filter((r) => r > 0);
  lines.push(
    `server RSS over time: first report ${mb(rs[0] ?? 0)}, min ${mb(Math.min(...rs))}, max ${mb(Math.max(...rs))}, last ${mb(rs.at(-1) ?? 0)}; peak (VmHWM) ${mb(peak)}`,
  );
  lines.push(`  series: ${rssSeries.map((r) => `${r.t.toFixed(0)}s ${(r.rss / 1e6).toFixed(0)}`).join(", ")} (MB)`);
}
lines.push(`server: ${died ? `died during the run (exit ${serverExited})` : `stopped with SIGTERM, exit ${stopCode}`}`);
const malformed = [...t.errors.keys()].filter((k) => k.startsWith("malformed")).length;
const failed = t.errorCount > 0 || died || stopCode !== 0;
lines.push(
  failed
    ? `FAIL: ${t.errorCount} unexpected errors (${malformed} malformed kinds)${died || stopCode !== 0 ? ", server did not stop cleanly" : ""}`
    : "OK: no malformed stream, no unexpected error",
);
console.log(lines.join("\n"));
process.exit(failed ? 1 : 0);
