/**
 * One run of a model's optimization track (one night): measure the incumbent twice (its spread is
 * the noise), measure candidates around it within the time budget (each winner confirmed at once:
 * side by side with the incumbent where the measurer can, else by measuring the incumbent and it
 * again, back to back), promote the round's best confirmed winner, and go on around it while time
 * is left. Every measurement is a row of `track_candidates`; one that throws or overruns its time
 * slice is recorded as failed and the run goes on.
 */
import { randomUUID } from "node:crypto";
import type { KilnDatabase } from "../catalogue/db.js";
import { currentPromotion, promoteArtifact, type Promotion } from "../catalogue/promotions.js";
import type { ComputeDevice } from "../runtime/device/index.js";
import { builtOnLoser, generateCandidates } from "./candidates.js";
import { assertSameDevice, GPU_DEFAULT_SETTINGS, type GpuPresence, type GpuProbe, probeHardwareGpu, skippedReason } from "./devices.js";
import type { SearchSpace, TrackJob } from "./job.js";
import {
  claimRun,
  finishCandidate,
  listCandidates,
  losingChanges,
  losingSettings,
  lost,
  startCandidate,
  triedSettings,
  type CandidateRecord,
} from "./records.js";
import {
  judge,
  judgePaired,
  meanMetrics,
  pairedGains,
  relativeSpread,
  sampleSpread,
  tooNoisy,
  widerSpread,
  type PromotionRule,
  type QualityMetrics,
  type SpeedMetrics,
} from "./rule.js";
import { completeSettings, DEFAULT_SETTINGS, describeChange, measuredThreads, servingSettings, settingsKey, type TrackSettings } from "./settings.js";

/** What one measurement gives. */
export interface Measurement {
  /** The artifact measured (compiled from the settings' compile options, or the one asked for). */
  artifactId: string;
  metrics: SpeedMetrics;
  quality: QualityMetrics;
  /** The device the artifact was built for and measured on (its manifest's); absent: the CPU. */
  device?: ComputeDevice;
}

export interface MeasureRequest {
  settings: TrackSettings;
  /** Measure this artifact (the promoted incumbent) instead of compiling the settings' options. */
  artifactId?: string;
  /** onnxruntime threads to use: the settings' own within the run's thread budget. */
  threads: number;
  /** Aborted when the measurement overruns its time slice or the run stops: stop and free the model. */
  signal: AbortSignal;
}

/** The incumbent and a candidate measured side by side: both loaded, their workload passes alternating. */
export interface PairedMeasurement {
  incumbent: Measurement;
  candidate: Measurement;
  /** Each pass's figures of both, in the order run. */
  passes: Array<{ incumbent: SpeedMetrics; candidate: SpeedMetrics }>;
}

/** Measures candidates: the real one loads models (`createModelMeasurer`); tests pass fakes. */
export interface Measurer {
  measure(request: MeasureRequest): Promise<Measurement>;
  /**
   * The incumbent (`incumbent`) and a candidate measured side by side, to confirm a winner: a change
   * in the machine's speed during the pair moves both alike. Without it, a winner is confirmed by
   * measuring the incumbent and it again, one after the other. Both requests share one signal.
   */
  measurePair?(incumbent: MeasureRequest, candidate: Omit<MeasureRequest, "signal">): Promise<PairedMeasurement>;
  /** Facts about where measurements run (CPU, memory, versions), recorded with each. */
  machine?(): Record<string, unknown>;
  /** The compile settings an existing artifact was built with, when it can tell. */
  compileSettingsOf?(artifactId: string): Partial<TrackSettings> | null;
  close?(): Promise<void>;
}

export interface RunTrackOptions {
  db: KilnDatabase;
  measurer: Measurer;
  /** Minutes this run may take. Default: the job's `budgetMinutes`. */
  budgetMinutes?: number;
  /** onnxruntime threads a measurement may use. Default: the job's `threadBudget`. */
  threadBudget?: number;
  /** Most candidates measured. Default: the job's `maxCandidates`. */
  maxCandidates?: number;
  /** Replaces parts of the job's promotion policy (tests force or forbid a win with it). */
  rule?: Partial<PromotionRule>;
  /** Progress lines. */
  log?: (line: string) => void;
  /** Stops the run after the measurement in progress is aborted. */
  signal?: AbortSignal;
  /** Milliseconds clock for the budget. Default `Date.now`. */
  clock?: () => number;
  /** Seconds a measurement that overran gets to free its model before the run moves on. Default 30. */
  cleanupGraceSeconds?: number;
  /** Whether a process id is alive (tells a dead run's 'running' rows from a live one's). */
  isAlive?: (pid: number) => boolean;
  /**
   * Asks whether a hardware WebGPU adapter is here, for a job with a `gpuSearchSpace`: then the GPU
   * lane is measured too (the budget split between the lanes), else its candidates are recorded as
   * skipped. Default {@link probeHardwareGpu}.
   */
  gpuProbe?: GpuProbe;
}

export interface TrackRunSummary {
  runId: string;
  slug: string;
  /** The incumbent at the start: its artifact, settings, mean metrics over its two repeats and their spread. */
  incumbent: { artifactId: string; settings: TrackSettings; metrics: SpeedMetrics; spread: Record<string, number>; quality: QualityMetrics | null } | null;
  /** This run's rows, in order. */
  records: CandidateRecord[];
  /** Promotions made, in order. */
  promoted: Promotion[];
  /** Why the run ended ("budget", "nothing left to try", ...). */
  ended: string;
  seconds: number;
  /** For a job with a GPU search space: whether the GPU lane was measured, on which adapter or why not, and how it ended. */
  gpu?: { measured: boolean; detail: string; ended?: string; runId?: string };
}

/**
 * One device's part of a run: where candidates are built and measured, what is searched, and the
 * settings its default compile serves with (the incumbent when the device has no promotion). Its
 * incumbent is the device's own promotion, and its winners are promoted on that device.
 */
interface Lane {
  device: ComputeDevice;
  space: SearchSpace;
  defaults: Readonly<TrackSettings>;
  /** Recorded with each measurement (the GPU adapter's name). */
  machine?: Record<string, unknown>;
}

/** A measurement that ran past its time slice. */
export class TimeSliceError extends Error {
  constructor(seconds: number, what: string) {
    super(`exceeded its time slice of ${Math.round(seconds)} s (${what})`);
    this.name = "TimeSliceError";
  }
}

/** A candidate confirmed this round: its metrics are the mean of its two measurements, or its side-by-side figures. */
interface Winner {
  id: string;
  settings: TrackSettings;
  artifactId: string;
  quality: QualityMetrics;
  samples: SpeedMetrics[];
  metrics: SpeedMetrics;
  spread: Record<string, number>;
  score: number;
  reason: string;
  change: string;
}

/** A candidate past its first measurement, its row open while it is confirmed. */
interface Screened {
  id: string;
  settings: TrackSettings;
  change: string;
  measurement: Measurement;
}

interface Incumbent {
  artifactId: string;
  settings: TrackSettings;
  /** Every measurement of it that counts; `metrics` is their mean. */
  samples: SpeedMetrics[];
  metrics: SpeedMetrics;
  spread: Record<string, number>;
  quality: QualityMetrics | null;
}

const fmt = (metrics: SpeedMetrics, quality: QualityMetrics | null) => {
  const n = (key: string, digits = 1) => (Number.isFinite(metrics[key]) ? metrics[key].toFixed(digits) : "-");
  const batches = Object.keys(metrics)
    .filter((k) => /^batch\d+_tokens_per_second$/.test(k))
    .map((k) => `${k.replace("_tokens_per_second", "")} ${n(k)}`);
  const q = quality ? `; KL ${quality.kl_divergence.toPrecision(3)}, ppl ×${quality.perplexity_ratio.toFixed(4)}` : "";
  return `decode ${n("decode_tokens_per_second")} tok/s, prefill ${n("prefill_tokens_per_second", 0)} tok/s, ${batches.join(", ")}${batches.length ? " tok/s, " : ""}TTFT ${n("ttft_ms", 0)} ms, RSS ${n("peak_rss_mb", 0)} MB${q}`;
};

/** Every metric's spread times `factor` (at least 1). */
const scaleSpread = (spread: Record<string, number>, factor: number) =>
  Object.fromEntries(Object.entries(spread).map(([k, v]) => [k, v * Math.max(1, factor)]));

const message = (err: unknown) => (err instanceof Error ? err.message : String(err)).split("\n")[0];

/** Of the incumbent's repeats, the two that agree best on the promotion metrics, with their spread. */
function closestPair(repeats: readonly Measurement[], rule: PromotionRule): { repeats: [Measurement, Measurement]; spread: Record<string, number> } | null {
  let best: { repeats: [Measurement, Measurement]; spread: Record<string, number>; worst: number } | null = null;
  for (let i = 0; i < repeats.length; i++) {
    for (let j = i + 1; j < repeats.length; j++) {
      const spread = relativeSpread(repeats[i].metrics, repeats[j].metrics);
      const worst = Math.max(0, ...rule.metrics.map((m) => spread[m] ?? 0));
      if (!best || worst < best.worst) best = { repeats: [repeats[i], repeats[j]], spread, worst };
    }
  }
  return best && { repeats: best.repeats, spread: best.spread };
}

/**
 * Runs one night of `job`'s track now: the CPU lane, and for a job with a GPU search space the GPU
 * lane where a hardware WebGPU adapter is present (each with half the budget), else its candidates
 * recorded as skipped. Never throws for a candidate's failure; throws when the run cannot start.
 */
export async function runTrack(job: TrackJob, options: RunTrackOptions): Promise<TrackRunSummary> {
  const cpuLane: Lane = { device: "cpu", space: job.searchSpace, defaults: DEFAULT_SETTINGS, machine: { device: "cpu" } };
  if (!job.gpuSearchSpace) return new TrackRun(job, options, cpuLane).run();
  const presence = await (options.gpuProbe ?? probeHardwareGpu)();
  if (!presence.present) {
    const cpu = await new TrackRun(job, options, cpuLane).run();
    const skipped = recordSkippedGpuCandidates(job, options, cpu.runId, presence, job.gpuSearchSpace);
    options.log?.(`${job.slug}: GPU lane: ${skipped.length} candidate(s) ${skippedReason(presence)}`);
    return { ...cpu, records: [...cpu.records, ...skipped], gpu: { measured: false, detail: presence.reason } };
  }
  const half = { ...options, budgetMinutes: (options.budgetMinutes ?? job.budgetMinutes) / 2 };
  const cpu = await new TrackRun(job, half, cpuLane).run();
  if (options.signal?.aborted) return { ...cpu, gpu: { measured: false, detail: "the run was stopped before the GPU lane" } };
  const gpuLane: Lane = {
    device: "webgpu",
    space: job.gpuSearchSpace,
    defaults: GPU_DEFAULT_SETTINGS,
    machine: { device: "webgpu", adapter: presence.adapter },
  };
  const gpu = await new TrackRun(job, half, gpuLane).run();
  return {
    ...cpu,
    records: [...cpu.records, ...gpu.records],
    promoted: [...cpu.promoted, ...gpu.promoted],
    seconds: cpu.seconds + gpu.seconds,
    gpu: { measured: true, detail: presence.adapter, ended: gpu.ended, runId: gpu.runId },
  };
}

/** The GPU lane's incumbent and candidates, each a row saying why it was not measured. */
function recordSkippedGpuCandidates(
  job: TrackJob,
  options: RunTrackOptions,
  runId: string,
  presence: Extract<GpuPresence, { present: false }>,
  space: SearchSpace,
): CandidateRecord[] {
  const threadBudget = options.threadBudget ?? job.threadBudget;
  const candidates = generateCandidates(GPU_DEFAULT_SETTINGS, space, { threadBudget, limit: options.maxCandidates ?? job.maxCandidates });
  const machine = { ...(options.measurer.machine?.() ?? {}), pid: process.pid, threadBudget, device: "webgpu" };
  const ids = [GPU_DEFAULT_SETTINGS, ...candidates].map((settings) => {
    const id = startCandidate(options.db, { runId, slug: job.slug, settings, change: describeChange(GPU_DEFAULT_SETTINGS, settings), machine });
    finishCandidate(options.db, id, { verdict: "rejected", reason: skippedReason(presence) });
    return id;
  });
  return listCandidates(options.db, job.slug).filter((r) => ids.includes(r.id));
}

/**
 * One run, phase by phase: {@link measureIncumbent} (the noise), then rounds of {@link screen} and
 * confirmation ({@link confirmSideBySide} or {@link confirmBackToBack}), {@link promote} the round's
 * best, and {@link finish} (the rows it leaves open, the last log line) however it ends.
 */
class TrackRun {
  private readonly db: KilnDatabase;
  private readonly measurer: Measurer;
  private readonly clock: () => number;
  private readonly log: (line: string) => void;
  private readonly started: number;
  private readonly deadline: number;
  private readonly threadBudget: number;
  private readonly maxCandidates: number;
  private readonly rule: PromotionRule;
  private readonly sliceMs: number;
  private readonly graceMs: number;
  private readonly runId = randomUUID();
  private readonly slug: string;
  private readonly machineBase: Record<string, unknown> & { pid: number };
  /** Winners are confirmed side by side with the incumbent where the measurer can. */
  private readonly sideBySide: boolean;

  private readonly promoted: Promotion[] = [];
  private ended = "finished";
  /** What the candidates are judged against: null until measured, then the latest promoted winner. */
  private incumbent: Incumbent | null = null;
  /** The incumbent's first measurements (that did not fail), and how long each took. */
  private readonly repeats: Measurement[] = [];
  private readonly repeatMs: number[] = [];
  /** What a measurement costs, about: the slower incumbent repeat (that one compiled and probed the reference, so this errs long). */
  private estimateMs = 0;
  /** Candidates measured in this run. */
  private measured = 0;
  /** Candidates measured since the incumbent last was (see promotion.remeasureEvery). */
  private sinceIncumbent = 0;
  /** When each settings key was tried against this incumbent; and those that lost outright against it. */
  private tried = new Map<string, string>();
  private losers = new Set<string>();

  constructor(
    private readonly job: TrackJob,
    private readonly options: RunTrackOptions,
    private readonly lane: Lane,
  ) {
    this.db = options.db;
    this.measurer = options.measurer;
    this.clock = options.clock ?? Date.now;
    this.log = options.log ?? (() => {});
    this.started = this.clock();
    this.deadline = this.started + (options.budgetMinutes ?? job.budgetMinutes) * 60_000;
    this.threadBudget = options.threadBudget ?? job.threadBudget;
    this.maxCandidates = options.maxCandidates ?? job.maxCandidates;
    this.rule = { ...job.promotion, ...options.rule };
    this.sliceMs = job.candidateMinutes * 60_000;
    this.graceMs = (options.cleanupGraceSeconds ?? 30) * 1000;
    this.slug = job.slug;
    this.machineBase = { ...(this.measurer.machine?.() ?? {}), ...lane.machine, pid: process.pid, threadBudget: this.threadBudget };
    this.sideBySide = this.measurer.measurePair !== undefined;
  }

  async run(): Promise<TrackRunSummary> {
    const { db, slug, runId } = this;
    // Each device's incumbent is its own promotion, else its default compile.
    const current = currentPromotion(db, slug, this.lane.device);
    const settings = completeSettings(
      { ...(current ? this.measurer.compileSettingsOf?.(current.artifactId) : {}), ...current?.settings, device: this.lane.device },
      this.lane.defaults,
    );
    const artifactId = current?.artifactId;
    const firstRow = claimRun(db, { runId, slug, settings, change: "", machine: this.machineFor(settings), artifactId }, this.options.isAlive);
    this.log(
      `${slug}: track run ${runId.slice(0, 8)} on ${this.lane.device}: budget ${this.options.budgetMinutes ?? this.job.budgetMinutes} min, ${this.threadBudget} thread(s); incumbent ${current ? `${current.artifactId} (promoted ${current.createdAt})` : "the default compile"}`,
    );
    try {
      if (!(await this.measureIncumbent(settings, artifactId, firstRow))) return this.summary();
      this.tried = triedSettings(db, slug, current?.createdAt ?? null);
      this.losers = losingSettings(db, slug, current?.createdAt ?? null);
      await this.rounds();
      return this.summary();
    } catch (err) {
      this.ended = `error: ${message(err)}`;
      throw err;
    } finally {
      this.finish();
    }
  }

  // ── the incumbent, twice ──

  /**
   * Measures the incumbent twice (a third time when the two differ past maxNoise): the closest two
   * are its figures and their spread the noise. False (with `ended` saying why) when there is no
   * noise estimate to judge candidates by.
   */
  private async measureIncumbent(settings: TrackSettings, artifactId: string | undefined, firstRow: string): Promise<boolean> {
    const { rule, slug } = this;
    await this.repeatIncumbent(1, "repeat 1 (noise)", settings, artifactId, firstRow);
    if (!this.options.signal?.aborted) await this.repeatIncumbent(2, "repeat 2 (noise)", settings, artifactId);
    let pair = closestPair(this.repeats, rule);
    if (pair && tooNoisy(pair.spread, rule).length > 0 && !this.options.signal?.aborted && this.deadline - this.clock() > 2 * Math.max(...this.repeatMs)) {
      this.log(`${slug}: the incumbent's repeats differ by ${tooNoisy(pair.spread, rule).join(", ")}, past maxNoise: measuring it a third time`);
      await this.repeatIncumbent(3, "repeat 3 (the first two were further apart than maxNoise)", settings, artifactId);
      pair = closestPair(this.repeats, rule);
    }
    if (!pair) {
      this.ended = this.options.signal?.aborted ? "stopped" : "the incumbent could not be measured twice, so there is no noise estimate to judge candidates by";
      return false;
    }
    const noisy = tooNoisy(pair.spread, rule);
    if (noisy.length > 0) {
      this.ended = `too noisy to judge: the incumbent's closest repeats differ by ${noisy.join(", ")} (maxNoise ${(rule.maxNoise * 100).toFixed(0)}%); nothing measured or promoted`;
      return false;
    }
    this.incumbent = {
      artifactId: pair.repeats[0].artifactId,
      settings,
      samples: pair.repeats.map((r) => r.metrics),
      metrics: meanMetrics(pair.repeats.map((r) => r.metrics)),
      spread: pair.spread,
      quality: pair.repeats[0].quality,
    };
    this.log(`${slug}: noise (incumbent repeat spread): ${this.spreadLine(this.incumbent.spread)}`);
    this.estimateMs = Math.max(...this.repeatMs);
    return true;
  }

  /** One of the incumbent's first measurements, recorded in `row` (a new row when absent); one that fails is recorded and left out. */
  private async repeatIncumbent(n: number, why: string, settings: TrackSettings, artifactId: string | undefined, row?: string): Promise<void> {
    const { db, runId, slug } = this;
    const id = row ?? startCandidate(db, { runId, slug, settings, change: "", machine: this.machineFor(settings), artifactId });
    const t0 = this.clock();
    try {
      const m = await this.measureOnce(settings, artifactId);
      this.repeatMs.push(this.clock() - t0);
      this.repeats.push(m);
      finishCandidate(db, id, { verdict: "incumbent", reason: why, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality });
      this.log(`${slug}: incumbent ${n}: ${fmt(m.metrics, m.quality)}`);
    } catch (err) {
      finishCandidate(db, id, { verdict: "failed", reason: `incumbent repeat ${n}: ${message(err)}` });
      this.log(`${slug}: incumbent ${n} failed: ${message(err)}`);
    }
  }

  /** The incumbent, once it has been measured. */
  private get measuredIncumbent(): Incumbent {
    if (!this.incumbent) throw new Error("the incumbent has not been measured");
    return this.incumbent;
  }

  /** One more measurement of the incumbent: its mean and its spread over every measurement so far. */
  private async remeasureIncumbent(why: string): Promise<Measurement | null> {
    const { db, runId, slug } = this;
    const current = this.measuredIncumbent;
    const id = startCandidate(db, {
      runId,
      slug,
      settings: current.settings,
      change: "",
      machine: this.machineFor(current.settings),
      artifactId: current.artifactId,
    });
    try {
      const m = await this.measureOnce(current.settings, current.artifactId);
      finishCandidate(db, id, { verdict: "incumbent", reason: why, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality });
      this.countIncumbent(m.metrics);
      return m;
    } catch (err) {
      finishCandidate(db, id, { verdict: "failed", reason: `incumbent, ${why}: ${message(err)}` });
      return null;
    }
  }

  /** A further measurement of the incumbent counts in its mean and widens its spread. */
  private countIncumbent(metrics: SpeedMetrics): void {
    const current = this.measuredIncumbent;
    current.samples.push(metrics);
    current.metrics = meanMetrics(current.samples);
    current.spread = widerSpread(current.spread, sampleSpread(current.samples));
    this.sinceIncumbent = 0;
  }

  // ── rounds of candidates around the incumbent ──

  /** Rounds until nothing is left to try, no candidate wins, or a round stops early; each round's best winner is promoted. */
  private async rounds(): Promise<void> {
    for (;;) {
      const candidates = generateCandidates(this.measuredIncumbent.settings, this.lane.space, {
        threadBudget: this.threadBudget,
        tried: this.tried,
        losers: this.losers,
        losingChanges: losingChanges(this.db, this.slug),
      });
      if (candidates.length === 0) {
        this.ended = "nothing left to try around the incumbent";
        return;
      }
      const { winners, stop } = await this.round(candidates);
      if (winners.length === 0) {
        this.ended = stop ?? "no candidate won this round";
        return;
      }
      this.promote(winners);
      if (stop) {
        this.ended = stop;
        return;
      }
    }
  }

  /** One round: each candidate screened and, when it passes, confirmed; `stop` says why the round ended early (null: every candidate was seen). */
  private async round(candidates: readonly TrackSettings[]): Promise<{ winners: Winner[]; stop: string | null }> {
    // Winners confirmed by a second measurement, waiting for the round's end.
    const winners: Winner[] = [];
    for (const settings of candidates) {
      if (this.options.signal?.aborted) return { winners, stop: "stopped" };
      if (this.measured >= this.maxCandidates) return { winners, stop: `measured maxCandidates (${this.maxCandidates})` };
      // Its part that lost alone (earlier this round) would only drag the other down.
      if (builtOnLoser(this.measuredIncumbent.settings, settings, this.losers)) continue;
      // Room for this measurement and, should it win, its confirmation (the incumbent and it again,
      // or both side by side: twice the passes of two models, about four measurements).
      if (this.deadline - this.clock() < (this.sideBySide ? 5 : 3) * this.estimateMs) return { winners, stop: "the time budget" };
      const remeasureEvery = this.job.promotion.remeasureEvery;
      if (remeasureEvery > 0 && this.sinceIncumbent >= remeasureEvery) {
        if (this.deadline - this.clock() < 4 * this.estimateMs) return { winners, stop: "the time budget" };
        const again = await this.remeasureIncumbent(`measured again after ${this.sinceIncumbent} candidates (drift)`);
        if (again) this.log(`${this.slug}: incumbent again: ${fmt(again.metrics, again.quality)}; noise now ${this.spreadLine(this.measuredIncumbent.spread)}`);
      }
      const screened = await this.screen(settings);
      if (!screened) continue;
      const winner = this.sideBySide ? await this.confirmSideBySide(screened) : await this.confirmBackToBack(screened);
      if (winner) winners.push(winner);
    }
    return { winners, stop: null };
  }

  /**
   * A candidate's first measurement, judged against the incumbent: the candidate when it goes on to
   * be confirmed (its row left open), else null (its row finished as failed or rejected).
   */
  private async screen(settings: TrackSettings): Promise<Screened | null> {
    const { db, runId, slug, rule } = this;
    const incumbent = this.measuredIncumbent;
    assertSameDevice(incumbent.settings, settings);
    this.measured++;
    this.sinceIncumbent++;
    const change = describeChange(incumbent.settings, settings);
    const id = startCandidate(db, { runId, slug, settings, change, machine: this.machineFor(settings) });
    this.tried.set(settingsKey(settings), new Date().toISOString());
    let m: Measurement;
    try {
      m = await this.measureOnce(settings);
    } catch (err) {
      finishCandidate(db, id, { verdict: "failed", reason: message(err) });
      this.losers.add(settingsKey(settings));
      this.log(`${slug}: ${change}: failed: ${message(err)}`);
      return null;
    }
    // With side-by-side confirmation, the first measurement only screens: any gain past minGain
    // goes on to the pair, which alone can tell a real 10% from the machine's drift, and only a
    // loss past noiseFactor x the spread (the margin a win needed before) stops it here.
    const first = this.sideBySide
      ? judge({ metrics: incumbent.metrics, spread: scaleSpread(incumbent.spread, rule.noiseFactor) }, m, { ...rule, noiseFactor: 0 }, this.job.quality)
      : judge(incumbent, m, rule, this.job.quality);
    this.log(
      `${slug}: ${change}: ${fmt(m.metrics, m.quality)}: ${first.wins ? (this.sideBySide ? "passes the screen; measuring it side by side with the incumbent" : "wins; measuring it again") : "rejected"} (${first.reason})`,
    );
    if (!first.wins) {
      finishCandidate(db, id, { verdict: "rejected", reason: first.reason, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality });
      if (lost("rejected", first.reason)) this.losers.add(settingsKey(settings));
      return null;
    }
    finishCandidate(db, id, {
      verdict: "running",
      reason: `${first.reason} (being confirmed)`,
      artifactId: m.artifactId,
      metrics: m.metrics,
      quality: m.quality,
      open: true,
    });
    return { id, settings, change, measurement: m };
  }

  // ── confirmation ──

  /**
   * Confirms a screened winner side by side with the incumbent (Measurer.measurePair): both loaded,
   * their passes alternating, judged by the median of the per-pass gains (judgePaired). The
   * incumbent's figures count as one more of its measurements. Returns the confirmed winner, or
   * null (recorded as rejected).
   */
  private async confirmSideBySide({ id, settings, change, measurement: m }: Screened): Promise<Winner | null> {
    const { db, runId, slug, rule } = this;
    const current = this.measuredIncumbent;
    let pair: PairedMeasurement;
    try {
      pair = await this.measurePairOnce(current, settings);
    } catch (err) {
      finishCandidate(db, id, { verdict: "rejected", reason: `its side-by-side measurement failed: ${message(err)}` });
      return null;
    }
    // Load time and RSS are not measured side by side (two models share the process): each side keeps its own earlier figures.
    const incumbentMetrics = { ...current.metrics, ...pair.incumbent.metrics };
    const beside = startCandidate(db, {
      runId,
      slug,
      settings: current.settings,
      change: "",
      machine: this.machineFor(current.settings),
      artifactId: current.artifactId,
    });
    finishCandidate(db, beside, {
      verdict: "incumbent",
      reason: `measured side by side with ${change} (${pair.passes.length} alternating passes)`,
      artifactId: pair.incumbent.artifactId,
      metrics: incumbentMetrics,
      quality: pair.incumbent.quality,
    });
    this.countIncumbent(incumbentMetrics);
    const verdict = judgePaired(pairedGains(pair.passes, rule.metrics), m.quality, rule, this.job.quality);
    const metrics = { ...m.metrics, ...pair.candidate.metrics };
    if (!verdict.wins) {
      finishCandidate(db, id, { verdict: "rejected", reason: `did not hold side by side: ${verdict.reason}`, metrics });
      this.log(`${slug}: ${change}: not confirmed (${verdict.reason})`);
      return null;
    }
    finishCandidate(db, id, { verdict: "running", reason: `${verdict.reason} (confirmed; the round's best is promoted)`, metrics, open: true });
    this.log(`${slug}: ${change}: confirmed (${verdict.reason})`);
    return {
      id,
      settings,
      artifactId: m.artifactId,
      quality: m.quality,
      samples: [m.metrics, metrics],
      metrics,
      spread: relativeSpread(m.metrics, metrics),
      score: verdict.score,
      reason: verdict.reason,
      change,
    };
  }

  /**
   * Confirms a screened winner by measuring the incumbent and it again, back to back, so that a
   * change in the machine's load since the incumbent's repeats cannot make the win; both the mean
   * of all measurements and this pair alone must win, so one lucky sample cannot carry it.
   */
  private async confirmBackToBack({ id, settings, change, measurement: m }: Screened): Promise<Winner | null> {
    const { db, slug, rule } = this;
    const fresh = await this.remeasureIncumbent(`measured again beside ${change}`);
    if (!fresh) {
      finishCandidate(db, id, { verdict: "rejected", reason: "the incumbent could not be measured again to confirm it" });
      return null;
    }
    let second: Measurement;
    try {
      second = await this.measureOnce(settings);
    } catch (err) {
      finishCandidate(db, id, { verdict: "rejected", reason: `its confirming measurement failed: ${message(err)}` });
      return null;
    }
    const incumbent = this.measuredIncumbent;
    const metrics = meanMetrics([m.metrics, second.metrics]);
    const mean = judge(incumbent, { metrics, quality: m.quality }, rule, this.job.quality);
    const paired = judge({ metrics: fresh.metrics, spread: incumbent.spread }, { metrics: second.metrics, quality: m.quality }, rule, this.job.quality);
    if (!(mean.wins && paired.wins)) {
      const why = mean.wins ? `beside the incumbent measured again: ${paired.reason}` : mean.reason;
      finishCandidate(db, id, { verdict: "rejected", reason: `did not hold on a second measurement: ${why}`, metrics });
      this.log(`${slug}: ${change}: not confirmed (${why})`);
      return null;
    }
    finishCandidate(db, id, { verdict: "running", reason: `${mean.reason} (confirmed; the round's best is promoted)`, metrics, open: true });
    this.log(`${slug}: ${change}: confirmed (${mean.reason})`);
    return {
      id,
      settings,
      artifactId: m.artifactId,
      quality: m.quality,
      samples: [m.metrics, second.metrics],
      metrics,
      spread: relativeSpread(m.metrics, second.metrics),
      score: mean.score,
      reason: mean.reason,
      change,
    };
  }

  // ── the decision ──

  /** Promotes the round's best confirmed winner (the others are rejected); the next round starts from it. */
  private promote(winners: Winner[]): void {
    const { db, slug } = this;
    winners.sort((a, b) => b.score - a.score);
    const [best, ...rest] = winners;
    assertSameDevice(this.measuredIncumbent.settings, best.settings);
    for (const other of rest)
      finishCandidate(db, other.id, { verdict: "rejected", reason: `won (${other.reason}), but ${best.change} gained more and was promoted` });
    const where = this.lane.device === "cpu" ? "" : ` on ${this.lane.device}`;
    const reason = `track${where}: ${best.change}: ${best.reason}${this.sideBySide ? "" : " (mean of 2 measurements)"}`;
    const promotion = promoteArtifact(db, {
      slug,
      artifactId: best.artifactId,
      settings: servingSettings(best.settings),
      metrics: best.metrics,
      quality: { ...best.quality },
      reason,
    });
    this.promoted.push(promotion);
    finishCandidate(db, best.id, { verdict: "promoted", reason: best.reason });
    this.log(`${slug}: promoted ${best.artifactId}${where} with ${best.change}: ${best.reason}`);
    this.adopt(best);
  }

  /** The next round starts from `best`. */
  private adopt(best: Winner): void {
    this.incumbent = {
      artifactId: best.artifactId,
      settings: best.settings,
      samples: [...best.samples],
      metrics: best.metrics,
      spread: widerSpread(this.measuredIncumbent.spread, best.spread),
      quality: best.quality,
    };
    this.tried = new Map();
    this.losers = new Set();
  }

  // ── the record ──

  /** Whatever is still open belongs to this run and will not be finished by it; the run's last log line. */
  private finish(): void {
    const { db, slug, runId } = this;
    for (const record of listCandidates(db, slug).filter((r) => r.runId === runId && r.verdict === "running")) {
      finishCandidate(db, record.id, { verdict: "failed", reason: `the run ended (${this.ended}) before this was decided` });
    }
    this.log(
      `${slug}: track run ${runId.slice(0, 8)} ended after ${((this.clock() - this.started) / 1000).toFixed(0)} s: ${this.ended}; ${this.promoted.length} promotion(s)`,
    );
  }

  private summary(): TrackRunSummary {
    return {
      runId: this.runId,
      slug: this.slug,
      incumbent: this.incumbent,
      records: listCandidates(this.db, this.slug).filter((r) => r.runId === this.runId),
      promoted: this.promoted,
      ended: this.ended,
      seconds: (this.clock() - this.started) / 1000,
    };
  }

  // ── measuring within the time slices ──

  private machineFor(settings: TrackSettings): Record<string, unknown> & { pid: number } {
    return { ...this.machineBase, device: settings.device, threads: measuredThreads(settings, this.threadBudget) };
  }

  /**
   * One measurement within its slice (and the run's budget); aborted and given up on when it
   * overruns. An artifact built for another device than the settings' fails it: its figures would
   * be compared with the wrong incumbent.
   */
  private async measureOnce(settings: TrackSettings, artifactId?: string): Promise<Measurement> {
    const m = await this.withinSlice(1, (signal) =>
      this.measurer.measure({ settings, artifactId, threads: measuredThreads(settings, this.threadBudget), signal }),
    );
    const built = m.device ?? "cpu";
    if (built !== settings.device) throw new Error(`the artifact ${m.artifactId} was built for ${built}, not ${settings.device}`);
    return m;
  }

  /** The incumbent and a candidate side by side (Measurer.measurePair), within two slices. */
  private measurePairOnce(current: Incumbent, settings: TrackSettings): Promise<PairedMeasurement> {
    return this.withinSlice(2, (signal) =>
      this.measurer.measurePair!(
        { settings: current.settings, artifactId: current.artifactId, threads: measuredThreads(current.settings, this.threadBudget), signal },
        { settings, threads: measuredThreads(settings, this.threadBudget) },
      ),
    );
  }

  /** Runs `measure` within `slices` time slices (and the run's budget); aborted and given up on when it overruns. */
  private async withinSlice<T>(slices: number, measure: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const runSignal = this.options.signal;
    runSignal?.throwIfAborted();
    const controller = new AbortController();
    const stopOnRunAbort = () => controller.abort(runSignal?.reason);
    runSignal?.addEventListener("abort", stopOnRunAbort, { once: true });
    const limitMs = Math.max(0, Math.min(slices * this.sliceMs, this.deadline - this.clock()));
    const what =
      limitMs < slices * this.sliceMs ? "the run's budget ran out" : `candidateMinutes ${this.job.candidateMinutes}${slices > 1 ? ` x ${slices}` : ""}`;
    let timer: NodeJS.Timeout | undefined;
    const work = measure(controller.signal);
    try {
      return await Promise.race([
        work,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new TimeSliceError(limitMs / 1000, what)), limitMs);
        }),
      ]);
    } catch (err) {
      if (err instanceof TimeSliceError) {
        controller.abort(err);
        // Let it free its model before the next one loads, but never wait on a measurement that hangs.
        await Promise.race([work.catch(() => {}), new Promise((resolve) => setTimeout(resolve, this.graceMs).unref())]);
      }
      throw err;
    } finally {
      clearTimeout(timer);
      runSignal?.removeEventListener("abort", stopOnRunAbort);
    }
  }

  /** The spread of the promotion metrics, as "prefill 8.7%, decode 2.0%". */
  private spreadLine(spread: Record<string, number>): string {
    return Object.entries(spread)
      .filter(([k]) => this.rule.metrics.includes(k))
      .map(([k, v]) => `${k.replace("_tokens_per_second", "")} ${(v * 100).toFixed(1)}%`)
      .join(", ");
  }
}
