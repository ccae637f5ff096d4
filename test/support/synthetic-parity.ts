/**
 * The harness of the synthetic parity tests: a random-weight GGUF written by a fixture is run by
 * llama.cpp (node-llama-cpp, CPU, flash attention off: the path kiln's "llama.cpp" numerics
 * reproduce) and by kiln compiled with each numerics; at every step (prefill of each prompt, then
 * teacher-forced single-token steps) the log-probabilities of llama.cpp's 20 most likely tokens are
 * compared. `describeSyntheticParity` registers a describe block per case with the checks of
 * `synthetic-parity.test.ts`; `measureParity` is the same measurement for a scratch script (it takes
 * the compiler and session to use, so a deliberately broken copy of the compiler can be measured).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, type Llama, type LlamaContextSequence } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf } from "../../src/compiler/compile.js";
import { TextSession } from "../../src/runtime/text-worker/session.js";
import type { MetaValue } from "../fixtures/gguf/write-gguf.js";
import { Random, tokenizerMetadata } from "../fixtures/synthetic/tiny-model.js";
import { textGgufPath } from "./model.js";

export type Numerics = "llama.cpp" | "fast";
export const NUMERICS: readonly Numerics[] = ["llama.cpp", "fast"];

export interface ParityCase<Spec> {
  name: string;
  spec: Spec;
  /** Largest allowed |log p_kiln - log p_llama.cpp| over llama.cpp's top 20, any step, by numerics. */
  limit: Record<Numerics, number>;
  /** Substrings expected among the artifact's recorded choices ("what: choice"). */
  choices: string[];
  /** llama.cpp's context size (what LongRoPE's long/short choice depends on). Default 512. */
  contextSize?: number;
  /** Largest allowed median step with llama.cpp numerics. Default {@link EMULATED_MEDIAN}. */
  medianLimit?: number;
}

/** How a fixture writes a case's GGUF file (with the real tokenizer's metadata copied in). */
export type WriteFixture<Spec> = (path: string, spec: Spec, tokenizer: Array<[string, MetaValue]>) => Promise<unknown>;

export interface ParityRun {
  prompt: number[];
  decode: number[];
}

/** Prompts of 1, 7 and 40 tokens, then 5 decode steps each. */
export const PROMPT_LENGTHS = [1, 7, 40];
export const DECODE_STEPS = 5;
export const TOP = 20;
/**
 * With "llama.cpp" numerics, rounding flips make some steps differ (see synthetic-parity.test.ts),
 * but most steps must agree within flip-free noise: the median step stays below this.
 */
export const EMULATED_MEDIAN = 0.05;

/** Token ids away from SmolLM2's special tokens (0..16); the same for every case. */
export function makeRuns(): ParityRun[] {
  const rnd = new Random(2024);
  const ids = (n: number) => Array.from({ length: n }, () => rnd.int(100, 49000));
  return PROMPT_LENGTHS.map((n) => ({ prompt: ids(n), decode: ids(DECODE_STEPS) }));
}

/** llama.cpp's top-20 (token, log-prob) at one step. */
export type StepTop = Array<[number, number]>;

function topOf(probabilities: Map<number, number> | undefined): StepTop {
  if (!probabilities) throw new Error("llama.cpp returned no probabilities");
  const out: StepTop = [];
  for (const [token, p] of probabilities) {
    out.push([Number(token), Math.log(p)]);
    if (out.length === TOP) break;
  }
  return out;
}

/**
 * node-llama-cpp 3.21 hands back no raw logits, but with no sampling options its probabilities are
 * the plain softmax over the whole vocabulary (checked: kiln's log-softmax matches them to 1e-4).
 */
async function llamaSteps(sequence: LlamaContextSequence, run: ParityRun): Promise<StepTop[]> {
  await sequence.clearHistory();
  const next = { generateNext: { probabilities: true } } as const;
  const prefill = await sequence.controlledEvaluate(run.prompt.map((t, i) => (i === run.prompt.length - 1 ? [t, next] : t)) as never);
  const steps = [topOf(prefill[run.prompt.length - 1]?.next.probabilities as Map<number, number> | undefined)];
  for (const token of run.decode) {
    const out = await sequence.controlledEvaluate([[token, next]] as never);
    steps.push(topOf(out[0]?.next.probabilities as Map<number, number> | undefined));
  }
  return steps;
}

/** llama.cpp's steps for every run on one GGUF file. */
export async function llamaCppReference(llama: Llama, ggufPath: string, runs: ParityRun[], contextSize = 512): Promise<StepTop[][]> {
  const model = await llama.loadModel({ modelPath: ggufPath });
  const context = await model.createContext({ contextSize, threads: 2, flashAttention: false });
  try {
    const sequence = context.getSequence();
    const references: StepTop[][] = [];
    for (const run of runs) references.push(await llamaSteps(sequence, run));
    return references;
  } finally {
    await context.dispose();
    await model.dispose();
  }
}

function logSoftmax(a: Float32Array): Float64Array {
  let max = -Infinity;
  for (const v of a) max = Math.max(max, v);
  let sum = 0;
  for (const v of a) sum += Math.exp(v - max);
  const lse = Math.log(sum) + max;
  return Float64Array.from(a, (v) => v - lse);
}

/** What kiln's side needs: a compiler and a session loader (the real ones, or a scratch copy's). */
export interface KilnSide {
  compile: typeof compileGguf;
  load: (dir: string) => Promise<Pick<TextSession, "forward" | "release" | "kv">>;
}

export const REAL_KILN: KilnSide = { compile: compileGguf, load: (dir) => TextSession.load(dir, { threads: 2 }) };

export interface ParityResult {
  /** diffs[numerics][run][step]: max |log p_kiln - log p_llama| over llama.cpp's top 20. */
  diffs: Record<Numerics, number[][]>;
  /** "what: choice" of every recorded choice, both compiles. */
  choices: string[];
  /** llama.cpp's own spread: log-prob gap between its 1st and 20th token at the first prefill. */
  spread: number;
}

/** Compiles `ggufPath` with each of `compared` (default both numerics) and compares kiln's steps with the references. */
export async function kilnParity(
  kiln: KilnSide,
  ggufPath: string,
  home: string,
  runs: ParityRun[],
  references: StepTop[][],
  compared: readonly Numerics[] = NUMERICS,
): Promise<ParityResult> {
  const result: ParityResult = { diffs: { "llama.cpp": [], fast: [] }, choices: [], spread: references[0][0][0][1] - references[0][0][TOP - 1][1] };
  for (const numerics of compared) {
    // A fresh home per run: artifact ids depend on the source file and options, not on the compiler's code.
    const compiled = await kiln.compile({ slug: "synthetic", ggufPath, home, options: { numerics } });
    result.choices.push(...compiled.manifest.choices.map((ch) => `${ch.what}: ${ch.choice}`));
    const session = await kiln.load(compiled.dir);
    try {
      for (let r = 0; r < runs.length; r++) {
        const run = runs[r];
        const diffs: number[] = [];
        const compare = (logits: Float32Array, top: StepTop) => {
          const lp = logSoftmax(logits);
          diffs.push(Math.max(...top.map(([t, ref]) => Math.abs(lp[t] - ref))));
        };
        session.kv.truncate(0, 0);
        compare(await session.forward(0, 1, run.prompt.length, run.prompt), references[r][0]);
        for (let j = 0; j < run.decode.length; j++) compare(await session.forward(0, 1, 1, [run.decode[j]]), references[r][j + 1]);
        result.diffs[numerics].push(diffs);
      }
    } finally {
      await session.release();
    }
    rmSync(compiled.dir, { recursive: true, force: true });
  }
  return result;
}

/** One line per case: the worst difference per numerics, per prompt, the median step, llama.cpp's spread. */
export function summarize(name: string, r: ParityResult): string {
  const worst = (n: Numerics) => (r.diffs[n].length ? Math.max(...r.diffs[n].flat()).toFixed(5) : "-");
  const steps = r.diffs["llama.cpp"].flat().sort((a, b) => a - b);
  const perRun = (n: Numerics) => r.diffs[n].map((d) => Math.max(...d).toFixed(5)).join("/");
  return `${name}\n  llama.cpp numerics ${worst("llama.cpp")} (per prompt ${perRun("llama.cpp")}, median step ${steps[Math.floor(steps.length / 2)].toFixed(5)}), fast ${worst("fast")} (per prompt ${perRun("fast")}), llama.cpp top-20 spread ${r.spread.toFixed(2)} nats`;
}

/** The tokenizer every synthetic model carries (SmolLM2's: llama.cpp loads nothing without one). */
export async function syntheticTokenizer(): Promise<Array<[string, MetaValue]>> {
  return tokenizerMetadata(process.env.KILN_TEST_GGUF ?? (await textGgufPath()));
}

/**
 * Registers the parity tests of `cases`: per case, the GGUF is written by `write`, run by llama.cpp
 * and by kiln in both numerics, and checked: expected choices recorded, a spread-out distribution,
 * every step within the case's limit, and (llama.cpp numerics) the median step within
 * {@link EMULATED_MEDIAN}. Prints every case's figures at the end.
 */
export function describeSyntheticParity<Spec>(title: string, cases: Array<ParityCase<Spec>>, write: WriteFixture<Spec>): void {
  describe(title, () => {
    let llama: Llama;
    let work: string;
    let tokenizer: Array<[string, MetaValue]>;
    const runs = makeRuns();
    const results = new Map<string, ParityResult>();

    beforeAll(async () => {
      work = mkdtempSync(join(tmpdir(), "kiln-synthetic-"));
      tokenizer = await syntheticTokenizer();
      llama = await getLlama({ gpu: false });
    });

    afterAll(async () => {
      await llama?.dispose();
      if (work) rmSync(work, { recursive: true, force: true });
      console.log(
        `max |log-prob difference| over llama.cpp's top ${TOP}, prompts of ${PROMPT_LENGTHS.join("/")} tokens + ${DECODE_STEPS} steps:\n${[...results].map(([name, r]) => summarize(name, r)).join("\n")}`,
      );
    });

    cases.forEach((c, index) => {
      describe(c.name, () => {
        beforeAll(async () => {
          const ggufPath = join(work, `case-${index}.gguf`);
          await write(ggufPath, c.spec, tokenizer);
          const references = await llamaCppReference(llama, ggufPath, runs, c.contextSize);
          results.set(c.name, await kilnParity(REAL_KILN, ggufPath, join(work, "home"), runs, references));
          if (process.env.KILN_SYNTHETIC_DEBUG)
            console.log(
              c.name,
              JSON.stringify(results.get(c.name)!.diffs, (_k, v) => (typeof v === "number" ? Number(v.toFixed(4)) : v)),
            );
        });

        it("records the expected graph choices", () => {
          const choices = results.get(c.name)!.choices.join("\n");
          for (const expected of c.choices) expect(choices).toContain(expected);
        });

        it("is a model with a spread-out next-token distribution (so differences are meaningful)", () => {
          expect(results.get(c.name)!.spread).toBeGreaterThan(2);
        });

        for (const numerics of NUMERICS) {
          it(`matches llama.cpp's log-probabilities at every prefill and decode step (${numerics} numerics)`, () => {
            const diffs = results.get(c.name)!.diffs[numerics];
            expect(diffs.length).toBe(runs.length);
            expect(Math.max(...diffs.flat())).toBeLessThan(c.limit[numerics]);
          });
        }

        it("reproduces llama.cpp's rounding at most steps with llama.cpp numerics", () => {
          const steps = results
            .get(c.name)!
            .diffs["llama.cpp"].flat()
            .sort((a, b) => a - b);
          expect(steps.length).toBe(runs.length * (DECODE_STEPS + 1));
          expect(steps[Math.floor(steps.length / 2)]).toBeLessThan(c.medianLimit ?? EMULATED_MEDIAN);
        });
      });
    });
  });
}
