/**
 * kiln beside onnxruntime-genai's own int4 and int8 CPU builds of the same weights, the strongest peer:
 * speed and fidelity against the exact float reference, in one table.
 *
 *   npm run bench -- peers [--model smollm2-135m-instruct] [--threads 2] [--runs 3] [--steps 64]
 *        [--min-fold matmul|8bit|block-means] [--lm-head source|4bit|4bit-rescored]
 *
 * Needs `bash scripts/peers/genai.sh` first (venv, float32 checkpoint from the GGUF, int4/int8 builds).
 * kiln runs the artifact `kiln serve` would load without a promotion (provisionArtifact: the
 * default compile; `--min-fold 8bit|block-means` and `--lm-head` the track's compile candidates instead), in this process, through TextSession as bench/text.ts does; genai runs in
 * bench/peers/genai_bench.py. Runs alternate kiln / genai so both see the same machine load; each
 * figure is the median of --runs.
 *
 * Workloads (same token ids for both: the held-out text repeated, from the genai script):
 * - decode@128: 127 tokens prefilled untimed, then --steps timed single-token forwards + greedy pick.
 * - prefill 512: one 512-token prompt into an empty cache.
 * - batch 16: 16 sequences of the same 127 tokens, then --steps forwards of all 16 at once
 *   (tokens/s summed over sequences).
 * Fidelity: teacher forced over bench/peers/heldout.txt; the reference is the float32 checkpoint
 * in torch; per position top-1 agreement and KL(reference || engine), mean over positions.
 */
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import type { LmHeadWeight, MinFold } from "../src/compiler/compile.js";
import { provisionArtifact } from "../src/provision/index.js";
import { LM_HEAD_WEIGHTS, MIN_FOLDS } from "../src/track/settings.js";
import { TextSession } from "../src/runtime/text-worker/session.js";
import { type Fidelity, GENAI_ROOT, type GenaiSpeed, genaiReady, kilnFidelity, loadReference, logSoftmaxRows, runGenai } from "./peers/genai.js";

const { values: args } = parseArgs({
  options: {
    model: { type: "string", default: "smollm2-135m-instruct" },
    threads: { type: "string", default: "2" },
    runs: { type: "string", default: "3" },
    steps: { type: "string", default: "64" },
    "min-fold": { type: "string", default: "matmul" },
    "lm-head": { type: "string", default: "source" },
  },
});
const minFold = args["min-fold"] as MinFold;
if (!(MIN_FOLDS as readonly string[]).includes(minFold)) throw new Error(`--min-fold must be one of ${MIN_FOLDS.join(", ")}, not ${minFold}`);
const lmHead = args["lm-head"] as LmHeadWeight;
if (!(LM_HEAD_WEIGHTS as readonly string[]).includes(lmHead)) throw new Error(`--lm-head must be one of ${LM_HEAD_WEIGHTS.join(", ")}, not ${lmHead}`);
const positiveInt = (name: string, v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, not ${v}`);
  return n;
};
const slug = args.model!;
const threads = positiveInt("threads", args.threads!);
const runs = positiveInt("runs", args.runs!);
const steps = positiveInt("steps", args.steps!);
const BUILDS = ["int4", "int8"];
const CONTEXT = 128;
const PREFILL = 512;
const BATCH = 16;

const log = (s: string) => process.stderr.write(`${s}\n`);
const now = () => performance.now();
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
function argmaxRows(logits: Float32Array, rows: number): number[] {
  const vocab = logits.length / rows;
  const out: number[] = [];
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let i = 1; i < vocab; i++) if (logits[r * vocab + i] > logits[r * vocab + best]) best = i;
    out.push(best);
  }
  return out;
}

if (!genaiReady(BUILDS)) {
  log(`onnxruntime-genai peer not built under ${GENAI_ROOT}: run \`bash scripts/peers/genai.sh\` first`);
  process.exit(1);
}
const load0 = loadavg()[0];

log(`kiln: provisioning ${slug} (pull + default compile, cached) ...`);
const compiled = await provisionArtifact(slug, { compile: { minFold, lmHead }, onStage: (s) => log(`  ${s}`) });
const kiln = await TextSession.load(compiled.dir, { threads, slots: BATCH });

// Fidelity first: the genai script writes the reference kiln is scored against.
log("fidelity: reference (torch float32) and genai builds ...");
const fid = await runGenai({ threads, builds: BUILDS, speed: false });
const reference = loadReference();
const kilnLogits = await kiln.forward(0, 1, reference.positions, reference.tokenIds.slice(0, reference.positions), true);
const kilnFid = kilnFidelity(logSoftmaxRows(kilnLogits, reference.vocab), reference);
kiln.kv.reset();
log(`kiln fidelity: top-1 ${(kilnFid.top1 * 100).toFixed(1)}%, mean KL ${kilnFid.klMean.toFixed(4)}`);
const ids = fid.promptIds;
if (ids.length < PREFILL) throw new Error(`genai_bench.py gave ${ids.length} prompt ids, fewer than ${PREFILL}`);

async function kilnPrefill(): Promise<number> {
  kiln.kv.reset();
  const t = now();
  await kiln.forward(0, 1, PREFILL, ids.slice(0, PREFILL));
  return PREFILL / ((now() - t) / 1000);
}
async function kilnDecode(rows: number): Promise<number> {
  kiln.kv.reset();
  const prompt = ids.slice(0, CONTEXT - 1);
  await kiln.forward(0, rows, prompt.length, Array.from({ length: rows }, () => prompt).flat());
  let toks = Array<number>(rows).fill(ids[CONTEXT - 1]);
  const t = now();
  for (let i = 0; i < steps; i++) toks = argmaxRows(await kiln.forward(0, rows, 1, toks), rows);
  return (rows * steps) / ((now() - t) / 1000);
}

const kilnSamples: Record<keyof GenaiSpeed, number[]> = { decode128: [], prefill512: [], batch16: [] };
const genaiSamples: Record<string, Record<keyof GenaiSpeed, number[]>> = Object.fromEntries(
  BUILDS.map((b) => [b, { decode128: [], prefill512: [], batch16: [] }]),
);
// Warm-up (genai_bench.py does the same): onnxruntime's first run of each shape allocates and plans.
await kilnPrefill();
await kilnDecode(1);
await kilnDecode(BATCH);
for (let r = 0; r < runs; r++) {
  const kilnRun = async () => {
    kilnSamples.prefill512.push(await kilnPrefill());
    kilnSamples.decode128.push(await kilnDecode(1));
    kilnSamples.batch16.push(await kilnDecode(BATCH));
    log(
      `kiln run ${r + 1}/${runs}: decode@128 ${kilnSamples.decode128.at(-1)!.toFixed(0)} tok/s, prefill 512 ${kilnSamples.prefill512.at(-1)!.toFixed(0)}, batch 16 ${kilnSamples.batch16.at(-1)!.toFixed(0)}`,
    );
  };
  const genaiRun = async () => {
    const g = await runGenai({ threads, steps, runs: 1, builds: r % 2 ? [...BUILDS].reverse() : BUILDS, fidelity: false });
    for (const b of BUILDS) for (const k of Object.keys(kilnSamples) as (keyof GenaiSpeed)[]) genaiSamples[b][k].push(g.builds[b].speed![k]);
  };
  if (r % 2 === 0) {
    await kilnRun();
    await genaiRun();
  } else {
    await genaiRun();
    await kilnRun();
  }
}
await kiln.release();

// ── table ─────────────────────────────────────────────────────────────────────────────────
const rows: { name: string; speed: GenaiSpeed; fidelity: Fidelity | undefined }[] = [
  {
    name: `kiln (${compiled.manifest.id.slice(0, 28)})`,
    speed: { decode128: median(kilnSamples.decode128), prefill512: median(kilnSamples.prefill512), batch16: median(kilnSamples.batch16) },
    fidelity: kilnFid,
  },
  ...BUILDS.map((b) => ({
    name: `onnxruntime-genai ${b}`,
    speed: { decode128: median(genaiSamples[b].decode128), prefill512: median(genaiSamples[b].prefill512), batch16: median(genaiSamples[b].batch16) },
    fidelity: fid.builds[b].fidelity,
  })),
];
const base = rows[0].speed;
const pad = (s: string, n: number) => s.padEnd(n);
const cell = (v: number, k: keyof GenaiSpeed, i: number) => (i === 0 ? `${v.toFixed(0)}` : `${v.toFixed(0)} (${(v / base[k]).toFixed(2)}x)`);
const out: string[] = [];
out.push("");
out.push(
  `kiln vs onnxruntime-genai ${fid.version ?? ""} on ${slug}, ${threads} threads, medians of ${runs} runs (${steps} timed steps); ${cpus().length} cores, load ${load0.toFixed(2)} -> ${loadavg()[0].toFixed(2)}`,
);
out.push(`${pad("engine", 44)}${pad("decode@128 tok/s", 20)}${pad("prefill 512 tok/s", 20)}${pad("batch 16 tok/s", 20)}${pad("top-1", 8)}mean KL (p99)`);
rows.forEach((r, i) => {
  const f = r.fidelity;
  out.push(
    `${pad(r.name, 44)}${pad(cell(r.speed.decode128, "decode128", i), 20)}${pad(cell(r.speed.prefill512, "prefill512", i), 20)}${pad(cell(r.speed.batch16, "batch16", i), 20)}${pad(f ? `${(f.top1 * 100).toFixed(1)}%` : "-", 8)}${f ? `${f.klMean.toFixed(4)} (${f.klP99.toFixed(3)})` : "-"}`,
  );
});
const spread = (xs: number[]) => `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`;
const allSamples = [kilnSamples, ...BUILDS.map((b) => genaiSamples[b])];
out.push(
  `spread (min-max of the runs): ${rows.map((r, i) => `${r.name.split(" (")[0]} ${spread(allSamples[i].decode128)} / ${spread(allSamples[i].prefill512)} / ${spread(allSamples[i].batch16)}`).join("; ")}`,
);
out.push(
  `(ratios against kiln; fidelity over ${reference.positions} held-out positions against the float32 checkpoint in torch, teacher forced; genai's int4 re-quantizes the already 4-bit weights)`,
);
process.stdout.write(`${out.join("\n")}\n`);
