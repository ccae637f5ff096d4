/**
 * Serving benchmark: the real `kiln serve` process over HTTP (streaming chat completions) against
 * llama.cpp (node-llama-cpp) with its own batched sequences, on the same GGUF, same thread count.
 *
 *   node --import tsx bench/serve.ts [--model smollm2-135m-instruct] [--concurrency 1,4,16,64]
 *        [--requests N] [--output-tokens 64] [--threads 2] [--max-running 16] [--skip-peer] [--skip-kiln]
 *
 * Workload: a fixed prompt set (the twenty chat prompts shared by the model tests), request i uses
 * prompt i mod 20; closed loop: C clients each send their next request as soon as the previous one
 * finished, until `--requests` (default max(4, 2*C)) have been sent at that level. Every request
 * generates exactly `--output-tokens` tokens: kiln gets `logit_bias` -100 on the artifact's
 * end-of-generation ids (manifest `stopTokenIds`) and temperature 0; llama.cpp is told to yield
 * end-of-generation tokens and keep going (`yieldEogToken`), temperature 0.
 *
 * Metrics (docs/benchmarks.md): TTFT (sent -> first content chunk), TPOT ((E2EL - TTFT) / (n - 1)
 * per request), ITL (gaps between content chunks, pooled), E2EL, completed req/s and output tok/s
 * over the level's wall time. kiln is measured at the client over HTTP on 127.0.0.1; llama.cpp is
 * measured in-process (no HTTP, no JSON, no SSE), on one context with `sequences: C`, each request on
 * its own `context.getSequence()`; the prompt ids come from kiln's own chat template and tokenizer
 * (same GGUF vocabulary), so both engines prefill the same tokens.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { getLlama, type Token } from "node-llama-cpp";
import { provisionArtifact } from "../src/provision/index.js";
import { ARTIFACT_FILES, readTokenizerSpec } from "../src/runtime/artifact/index.js";
import { ChatTemplate, Tokenizer } from "../src/runtime/text/index.js";
import { CHAT_PROMPTS } from "../test/support/model.js";

const { values: args } = parseArgs({
  options: {
    model: { type: "string", default: "smollm2-135m-instruct" },
    concurrency: { type: "string", default: "1,4,16,64" },
    requests: { type: "string" },
    "output-tokens": { type: "string", default: "64" },
    threads: { type: "string", default: "2" },
    "max-running": { type: "string", default: "16" },
    "skip-peer": { type: "boolean", default: false },
    "skip-kiln": { type: "boolean", default: false },
  },
  allowPositionals: true,
});
const slug = args.model!;
const levels = args.concurrency!.split(",").map((s) => positiveInt("concurrency", s.trim()));
const outTokens = positiveInt("output-tokens", args["output-tokens"]!);
const threads = positiveInt("threads", args.threads!);
const maxRunning = positiveInt("max-running", args["max-running"]!);
const requestsFor = (c: number) => (args.requests ? positiveInt("requests", args.requests) : Math.max(4, 2 * c));
if (outTokens < 2) throw new Error("--output-tokens must be at least 2 (TPOT divides by n - 1)");

function positiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, not ${v}`);
  return n;
}

const now = () => performance.now();
const log = (s: string) => process.stderr.write(`${s}\n`);
function pct(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const r = (p / 100) * (s.length - 1);
  const lo = Math.floor(r);
  const hi = Math.ceil(r);
  return s[lo] + (s[hi] - s[lo]) * (r - lo);
}

/** Busy cores since the last call: whole machine (/proc/stat) and "others" (minus this process and the kiln server). */
let serverPid: number | null = null;
let lastStat: { busy: number; ours: number; t: number } | null = null;
function procCpuS(pid: number): number {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, clock ticks
  } catch {
    return 0;
  }
}
function busyCores(): { all: number; others: number } | null {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
    const [user, nice, system, , , irq, softirq, steal = 0] = f;
    const u = process.cpuUsage();
    const ours = (u.user + u.system) / 1e6 + (serverPid ? procCpuS(serverPid) : 0);
    const cur = { busy: (user + nice + system + irq + softirq + steal) / 100, ours, t: now() / 1000 };
    const prev = lastStat;
    lastStat = cur;
    if (!prev) return null;
    const dt = cur.t - prev.t;
    const all = (cur.busy - prev.busy) / dt;
    return { all, others: Math.max(0, all - (cur.ours - prev.ours) / dt) };
  } catch {
    return null;
  }
}

/** VmHWM (peak RSS) in bytes of a process and its descendants (summed; kiln may run helpers). */
function peakRss(pid: number): number {
  let total = 0;
  const visit = (p: number) => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, "utf8"));
      if (m) total += Number(m[1]) * 1024;
      for (const task of readdirSync(`/proc/${p}/task`)) {
        const kids = readFileSync(`/proc/${p}/task/${task}/children`, "utf8").trim();
        for (const k of kids ? kids.split(/\s+/) : []) visit(Number(k));
      }
    } catch {
      /* gone */
    }
  };
  visit(pid);
  return total;
}

// ── model, prompts ──────────────────────────────────────────────────────────────────────────

log(`compiling/pulling ${slug} (cached) ...`);
const compiled = await provisionArtifact(slug, { onStage: (s) => log(`  ${s}`) });
const artifactDir = compiled.dir;
const stopIds = compiled.manifest.stopTokenIds;
const tokenizer = Tokenizer.fromSpec(readTokenizerSpec(artifactDir));
const template = new ChatTemplate(readFileSync(join(artifactDir, ARTIFACT_FILES.chatTemplate), "utf8"));
const { pullModel } = await import("../src/catalogue/pull/index.js");
const pulled = await pullModel(slug);
const ggufFile = pulled.files.find((f) => f.path.toLowerCase().endsWith(".gguf"));
if (!ggufFile) throw new Error(`${slug}: no .gguf among pulled files`);
const ggufPath = join(pulled.dir, ggufFile.path);

const messagesFor = (i: number) => [{ role: "user", content: CHAT_PROMPTS[i % CHAT_PROMPTS.length] }];
function promptIds(i: number): number[] {
  const text = template.render(messagesFor(i), {
    addGenerationPrompt: true,
    bosToken: tokenizer.bosId === null ? undefined : tokenizer.tokenText(tokenizer.bosId),
    eosToken: tokenizer.eosId === null ? undefined : tokenizer.tokenText(tokenizer.eosId),
  });
  const ids = tokenizer.encode(text, { parseSpecial: true });
  if (tokenizer.addBos && tokenizer.bosId !== null && ids[0] !== tokenizer.bosId) ids.unshift(tokenizer.bosId);
  return ids;
}
const PROMPTS = CHAT_PROMPTS.map((_, i) => promptIds(i));
const maxPrompt = Math.max(...PROMPTS.map((p) => p.length));
const meanPrompt = PROMPTS.reduce((a, p) => a + p.length, 0) / PROMPTS.length;
log(
  `prompts: ${PROMPTS.length}, ${Math.min(...PROMPTS.map((p) => p.length))}-${maxPrompt} tokens; output ${outTokens} tokens; stop ids banned: ${stopIds.join(",")}`,
);

// ── measurement ─────────────────────────────────────────────────────────────────────────────

interface Sample {
  ttft: number;
  e2el: number;
  itl: number[];
  tokens: number;
  promptTokens: number;
}
interface Level {
  c: number;
  requests: number;
  wallS: number;
  samples: Sample[];
  errors: string[];
  load: { all: number; others: number } | null;
}

async function closedLoop(c: number, n: number, one: (i: number, worker: number) => Promise<Sample>): Promise<Level> {
  let next = 0;
  const samples: Sample[] = [];
  const errors: string[] = [];
  busyCores();
  const t0 = now();
  await Promise.all(
    Array.from({ length: c }, async (_, w) => {
      while (next < n) {
        const i = next++;
        try {
          samples.push(await one(i, w));
        } catch (e) {
          errors.push(String((e as Error).message ?? e));
        }
      }
    }),
  );
  const wallS = (now() - t0) / 1000;
  return { c, requests: n, wallS, samples, errors, load: busyCores() };
}

// kiln over HTTP
async function kilnRequest(base: string, i: number): Promise<Sample> {
  const body = {
    model: slug,
    messages: messagesFor(i),
    max_tokens: outTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    logit_bias: Object.fromEntries(stopIds.map((id) => [String(id), -100])),
  };
  const t0 = now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-local-anything" },
    body: JSON.stringify(body),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const stamps: number[] = [];
  let usage: { completion_tokens: number; prompt_tokens: number } | null = null;
  let finish: string | null = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const t = now();
    buf += dec.decode(value, { stream: true });
    let k: number;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, k);
      buf = buf.slice(k + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.usage) usage = j.usage;
        const ch = j.choices?.[0];
        if (ch?.delta?.content) stamps.push(t);
        if (ch?.finish_reason) finish = ch.finish_reason;
      }
    }
  }
  const end = now();
  if (stamps.length === 0) throw new Error("no content chunks");
  const tokens = usage?.completion_tokens ?? stamps.length;
  if (tokens !== outTokens) throw new Error(`kiln generated ${tokens} of ${outTokens} tokens (finish ${finish})`);
  return {
    ttft: stamps[0] - t0,
    e2el: end - t0,
    itl: stamps.slice(1).map((s, j) => s - stamps[j]),
    tokens,
    promptTokens: usage?.prompt_tokens ?? PROMPTS[i % PROMPTS.length].length,
  };
}

async function runKiln(): Promise<{ levels: Level[]; rss: number; pid: number }> {
  const server: ChildProcess = spawn(
    process.execPath,
    [
      "bin/kiln.mjs",
      "serve",
      "--model",
      slug,
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--threads",
      String(threads),
      "--max-running",
      String(maxRunning),
      "--log-level",
      "warn",
    ],
    { env: process.env, stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  const base = await new Promise<string>((resolve, reject) => {
    let url = "";
    server.stderr!.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      url ||= /listening on (http:\/\/\S+)\/v1/.exec(stderr)?.[1] ?? "";
      if (url && stderr.includes("kiln serve: ready")) resolve(url);
    });
    server.once("exit", (code) => reject(new Error(`kiln serve exited with ${code}:\n${stderr}`)));
  });
  const host = new URL(base).hostname;
  if (host !== "127.0.0.1" && host !== "localhost") throw new Error(`kiln listens on ${base}; this benchmark only targets 127.0.0.1`);
  const url = base.replace("localhost", "127.0.0.1");
  serverPid = server.pid!;
  log(`kiln serve ready at ${url} (pid ${server.pid}, threads ${threads}, max-running ${maxRunning})`);
  try {
    await kilnRequest(url, 0); // warm-up, untimed
    const out: Level[] = [];
    for (const c of levels) {
      const lv = await closedLoop(c, requestsFor(c), (i) => kilnRequest(url, i));
      log(`  kiln C=${c}: ${lv.samples.length}/${lv.requests} ok in ${lv.wallS.toFixed(1)} s${lv.errors.length ? `, errors: ${lv.errors[0]}` : ""}`);
      out.push(lv);
    }
    const rss = peakRss(server.pid!);
    serverPid = null;
    return { levels: out, rss, pid: server.pid! };
  } finally {
    if (server.exitCode === null) {
      const exited = new Promise((r) => server.once("exit", r));
      server.kill("SIGTERM");
      await exited;
    }
  }
}

// llama.cpp in-process
async function runPeer(): Promise<Level[]> {
  const llama = await getLlama({ gpu: false });
  const model = await llama.loadModel({ modelPath: ggufPath });
  const out: Level[] = [];
  try {
    for (const c of levels) {
      const ctx = await model.createContext({
        sequences: c,
        contextSize: maxPrompt + outTokens + 32, // per sequence in node-llama-cpp (it allocates contextSize * sequences cells)
        threads: { ideal: threads, min: threads },
        batchSize: 512,
      });
      // One sequence per client, cleared between its requests (untimed), as a server would reuse its slots.
      const seqs = Array.from({ length: c }, () => ctx.getSequence());
      const one = async (i: number, w: number): Promise<Sample> => {
        const ids = PROMPTS[i % PROMPTS.length];
        const seq = seqs[w];
        const t0 = now();
        try {
          const gen = seq.evaluate(ids as Token[], { temperature: 0, yieldEogToken: true });
          const stamps: number[] = [];
          for (let k = 0; k < outTokens; k++) {
            const r = await gen.next();
            if (r.done) break;
            stamps.push(now());
          }
          await gen.return();
          if (stamps.length !== outTokens) throw new Error(`llama.cpp stopped after ${stamps.length} of ${outTokens}`);
          return {
            ttft: stamps[0] - t0,
            e2el: stamps[stamps.length - 1] - t0,
            itl: stamps.slice(1).map((s, j) => s - stamps[j]),
            tokens: stamps.length,
            promptTokens: ids.length,
          };
        } finally {
          await seq.clearHistory();
        }
      };
      try {
        await one(0, 0); // warm-up, untimed
        const lv = await closedLoop(c, requestsFor(c), one);
        log(`  llama.cpp C=${c}: ${lv.samples.length}/${lv.requests} ok in ${lv.wallS.toFixed(1)} s${lv.errors.length ? `, errors: ${lv.errors[0]}` : ""}`);
        out.push(lv);
      } finally {
        await ctx.dispose();
      }
    }
  } finally {
    await model.dispose();
  }
  return out;
}

// ── run and report ──────────────────────────────────────────────────────────────────────────

const loadBefore = loadavg();
const tStart = now();
const kiln = args["skip-kiln"] ? null : await runKiln();
const peer = args["skip-peer"] ? null : await runPeer();
const totalS = (now() - tStart) / 1000;

interface Row {
  ttft50: number;
  ttft99: number;
  tpot50: number;
  itl50: number;
  itl99: number;
  e2el50: number;
  e2el99: number;
  rps: number;
  tps: number;
  totalTps: number;
  load: { all: number; others: number } | null;
  ok: string;
}
function summarize(lv: Level | undefined): Row | null {
  if (!lv) return null;
  const s = lv.samples;
  const outTok = s.reduce((a, x) => a + x.tokens, 0);
  const inTok = s.reduce((a, x) => a + x.promptTokens, 0);
  return {
    ttft50: pct(
      s.map((x) => x.ttft),
      50,
    ),
    ttft99: pct(
      s.map((x) => x.ttft),
      99,
    ),
    tpot50: pct(
      s.map((x) => (x.e2el - x.ttft) / (x.tokens - 1)),
      50,
    ),
    itl50: pct(
      s.flatMap((x) => x.itl),
      50,
    ),
    itl99: pct(
      s.flatMap((x) => x.itl),
      99,
    ),
    e2el50: pct(
      s.map((x) => x.e2el),
      50,
    ),
    e2el99: pct(
      s.map((x) => x.e2el),
      99,
    ),
    rps: s.length / lv.wallS,
    tps: outTok / lv.wallS,
    totalTps: (outTok + inTok) / lv.wallS,
    load: lv.load,
    ok: `${s.length}/${lv.requests}`,
  };
}

const f = (x: number | undefined, d = 1) => (x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(d));
const pad = (s: string, w: number) => s.padStart(w);
const cols = [
  "C",
  "engine",
  "ok",
  "TTFT p50",
  "TTFT p99",
  "TPOT p50",
  "ITL p50",
  "ITL p99",
  "E2EL p50",
  "E2EL p99",
  "req/s",
  "out tok/s",
  "tot tok/s",
  "busy/others",
];
const widths = [3, 9, 6, 9, 9, 9, 8, 8, 9, 9, 7, 10, 10, 10];
const lines: string[] = [];
lines.push(
  `serving benchmark: ${slug}, ${threads} threads, output ${outTokens} tokens (EOS ignored), prompts ${PROMPTS.length} fixed (${meanPrompt.toFixed(0)} tokens mean), kiln --max-running ${maxRunning}`,
);
lines.push(`latencies in ms; kiln over HTTP+SSE on 127.0.0.1 (client-side); llama.cpp = node-llama-cpp in-process (no HTTP), one context with sequences=C`);
lines.push(cols.map((c, i) => pad(c, widths[i])).join(" "));
const ratios: string[] = [];
for (const c of levels) {
  const k = summarize(kiln?.levels.find((l) => l.c === c));
  const p = summarize(peer?.find((l) => l.c === c));
  for (const [name, r] of [
    ["kiln", k],
    ["llama.cpp", p],
  ] as const) {
    if (!r) continue;
    const cells = [
      String(c),
      name,
      r.ok,
      f(r.ttft50),
      f(r.ttft99),
      f(r.tpot50, 2),
      f(r.itl50, 2),
      f(r.itl99, 2),
      f(r.e2el50, 0),
      f(r.e2el99, 0),
      f(r.rps, 2),
      f(r.tps, 1),
      f(r.totalTps, 1),
      r.load === null ? "-" : `${f(r.load.all, 2)}/${f(r.load.others, 2)}`,
    ];
    lines.push(cells.map((s, i) => pad(s, widths[i])).join(" "));
  }
  if (k && p)
    ratios.push(
      `C=${String(c).padEnd(3)} kiln/llama.cpp: out tok/s ${f(k.tps / p.tps, 2)}x, TTFT p50 ${f(k.ttft50 / p.ttft50, 2)}x, TPOT p50 ${f(k.tpot50 / p.tpot50, 2)}x`,
    );
}
lines.push("", ...ratios, "");
if (kiln) lines.push(`peak RSS kiln serve process (VmHWM, pid ${kiln.pid} + children): ${(kiln.rss / 1e6).toFixed(1)} MB`);
lines.push(`peak RSS bench process (VmHWM; holds llama.cpp model + contexts): ${(peakRss(process.pid) / 1e6).toFixed(1)} MB`);
lines.push(
  `loadavg before ${loadBefore.map((x) => x.toFixed(2)).join(" ")}, after ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}; total ${totalS.toFixed(0)} s`,
);
lines.push(`"busy/others" = cores busy during that level: whole machine / other processes (machine minus bench process and kiln server); 2 cores total`);
console.log(lines.join("\n"));
