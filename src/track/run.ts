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
import { builtOnLoser, generateCandidates } from "./candidates.js";
import type { TrackJob } from "./job.js";
import { claimRun, finishCandidate, listCandidates, losingChanges, losingSettings, lost, startCandidate, triedSettings, type CandidateRecord } from "./records.js";
import { judge, judgePaired, meanMetrics, pairedGains, relativeSpread, sampleSpread, tooNoisy, widerSpread, type PromotionRule, type QualityMetrics, type SpeedMetrics } from "./rule.js";
import { completeSettings, describeChange, measuredThreads, servingSettings, settingsKey, type TrackSettings } from "./settings.js";

/** What one measurement gives. */
export interface Measurement {
  /** The artifact measured (compiled from the settings' compile options, or the one asked for). */
  artifactId: string;
  metrics: SpeedMetrics;
  quality: QualityMetrics;
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
const scaleSpread = (spread: Record<string, number>, factor: number) => Object.fromEntries(Object.entries(spread).map(([k, v]) => [k, v * Math.max(1, factor)]));

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

/** Runs one night of `job`'s track now. Never throws for a candidate's failure; throws when the run cannot start. */
export async function runTrack(job: TrackJob, options: RunTrackOptions): Promise<TrackRunSummary> {
  const { db, measurer } = options;
  const clock = options.clock ?? Date.now;
  const log = options.log ?? (() => {});
  const started = clock();
  const deadline = started + (options.budgetMinutes ?? job.budgetMinutes) * 60_000;
  const threadBudget = options.threadBudget ?? job.threadBudget;
  const maxCandidates = options.maxCandidates ?? job.maxCandidates;
  const rule: PromotionRule = { ...job.promotion, ...options.rule };
  const sliceMs = job.candidateMinutes * 60_000;
  const graceMs = (options.cleanupGraceSeconds ?? 30) * 1000;
  const runId = randomUUID();
  const slug = job.slug;
  const promoted: Promotion[] = [];
  const machineBase = { ...(measurer.machine?.() ?? {}), pid: process.pid, threadBudget };
  const machineFor = (settings: TrackSettings) => ({ ...machineBase, threads: measuredThreads(settings, threadBudget) });
  // Winners are confirmed side by side with the incumbent where the measurer can.
  const sideBySide = measurer.measurePair !== undefined;

  /** One measurement within its slice (and the run's budget); aborted and given up on when it overruns. */
  function measureOnce(settings: TrackSettings, artifactId?: string): Promise<Measurement> {
    return withinSlice(1, (signal) => measurer.measure({ settings, artifactId, threads: measuredThreads(settings, threadBudget), signal }));
  }

  /** The incumbent and a candidate side by side (Measurer.measurePair), within two slices. */
  function measurePairOnce(current: Incumbent, settings: TrackSettings): Promise<PairedMeasurement> {
    return withinSlice(2, (signal) =>
      measurer.measurePair!(
        { settings: current.settings, artifactId: current.artifactId, threads: measuredThreads(current.settings, threadBudget), signal },
        { settings, threads: measuredThreads(settings, threadBudget) },
      ),
    );
  }

  /** Runs `measure` within `slices` time slices (and the run's budget); aborted and given up on when it overruns. */
  async function withinSlice<T>(slices: number, measure: (signal: AbortSignal) => Promise<T>): Promise<T> {
    options.signal?.throwIfAborted();
    const controller = new AbortController();
    const stopOnRunAbort = () => controller.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", stopOnRunAbort, { once: true });
    const limitMs = Math.max(0, Math.min(slices * sliceMs, deadline - clock()));
    const what = limitMs < slices * sliceMs ? "the run's budget ran out" : `candidateMinutes ${job.candidateMinutes}${slices > 1 ? ` x ${slices}` : ""}`;
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
        await Promise.race([work.catch(() => {}), new Promise((resolve) => setTimeout(resolve, graceMs).unref())]);
      }
      throw err;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", stopOnRunAbort);
    }
  }

  /** The spread of the promotion metrics, as "prefill 8.7%, decode 2.0%". */
  const spreadLine = (spread: Record<string, number>) =>
    Object.entries(spread)
      .filter(([k]) => rule.metrics.includes(k))
      .map(([k, v]) => `${k.replace("_tokens_per_second", "")} ${(v * 100).toFixed(1)}%`)
      .join(", ");

  // ── the incumbent, twice ──
  const current = currentPromotion(db, slug);
  const incumbentSettings = completeSettings({ ...(current ? measurer.compileSettingsOf?.(current.artifactId) : {}), ...current?.settings });
  const incumbentArtifact = current?.artifactId;
  const firstRow = claimRun(db, { runId, slug, settings: incumbentSettings, change: "", machine: machineFor(incumbentSettings), artifactId: incumbentArtifact }, options.isAlive);
  log(`${slug}: track run ${runId.slice(0, 8)}: budget ${options.budgetMinutes ?? job.budgetMinutes} min, ${threadBudget} thread(s); incumbent ${current ? `${current.artifactId} (promoted ${current.createdAt})` : "the default compile"}`);

  let ended = "finished";
  let incumbent: Incumbent | null = null;
  try {
    const repeats: Measurement[] = [];
    const durations: number[] = [];
    const repeat = async (n: number, why: string) => {
      const id = n === 1 ? firstRow : startCandidate(db, { runId, slug, settings: incumbentSettings, change: "", machine: machineFor(incumbentSettings), artifactId: incumbentArtifact });
      const t0 = clock();
      try {
        const m = await measureOnce(incumbentSettings, incumbentArtifact);
        durations.push(clock() - t0);
        repeats.push(m);
        finishCandidate(db, id, { verdict: "incumbent", reason: why, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality });
        log(`${slug}: incumbent ${n}: ${fmt(m.metrics, m.quality)}`);
      } catch (err) {
        finishCandidate(db, id, { verdict: "failed", reason: `incumbent repeat ${n}: ${message(err)}` });
        log(`${slug}: incumbent ${n} failed: ${message(err)}`);
      }
    };
    await repeat(1, "repeat 1 (noise)");
    if (!options.signal?.aborted) await repeat(2, "repeat 2 (noise)");
    let pair = closestPair(repeats, rule);
    if (pair && tooNoisy(pair.spread, rule).length > 0 && !options.signal?.aborted && deadline - clock() > 2 * Math.max(...durations)) {
      log(`${slug}: the incumbent's repeats differ by ${tooNoisy(pair.spread, rule).join(", ")}, past maxNoise: measuring it a third time`);
      await repeat(3, "repeat 3 (the first two were further apart than maxNoise)");
      pair = closestPair(repeats, rule);
    }
    if (!pair) {
      ended = options.signal?.aborted ? "stopped" : "the incumbent could not be measured twice, so there is no noise estimate to judge candidates by";
      return summary();
    }
    const noisy = tooNoisy(pair.spread, rule);
    if (noisy.length > 0) {
      ended = `too noisy to judge: the incumbent's closest repeats differ by ${noisy.join(", ")} (maxNoise ${(rule.maxNoise * 100).toFixed(0)}%); nothing measured or promoted`;
      return summary();
    }
    incumbent = {
      artifactId: pair.repeats[0].artifactId,
      settings: incumbentSettings,
      samples: pair.repeats.map((r) => r.metrics),
      metrics: meanMetrics(pair.repeats.map((r) => r.metrics)),
      spread: pair.spread,
      quality: pair.repeats[0].quality,
    };
    log(`${slug}: noise (incumbent repeat spread): ${spreadLine(incumbent.spread)}`);
    // A measurement costs about what the slower incumbent repeat did (that one compiled and probed the reference, so this errs long).
    const estimateMs = Math.max(...durations);

    // ── rounds of candidates around the incumbent ──
    let measured = 0;
    // Candidates measured since the incumbent last was (see promotion.remeasureEvery).
    let sinceIncumbent = 0;
    /** One more measurement of the incumbent: its mean and its spread over every measurement so far. */
    const remeasureIncumbent = async (why: string): Promise<Measurement | null> => {
      const current = incumbent!;
      const id = startCandidate(db, { runId, slug, settings: current.settings, change: "", machine: machineFor(current.settings), artifactId: current.artifactId });
      try {
        const m = await measureOnce(current.settings, current.artifactId);
        finishCandidate(db, id, { verdict: "incumbent", reason: why, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality });
        current.samples.push(m.metrics);
        current.metrics = meanMetrics(current.samples);
        current.spread = widerSpread(current.spread, sampleSpread(current.samples));
        sinceIncumbent = 0;
        return m;
      } catch (err) {
        finishCandidate(db, id, { verdict: "failed", reason: `incumbent, ${why}: ${message(err)}` });
        return null;
      }
    };
    /**
     * Confirms a screened winner side by side with the incumbent (Measurer.measurePair): both loaded,
     * their passes alternating, judged by the median of the per-pass gains (judgePaired). The
     * incumbent's figures count as one more of its measurements. Returns the confirmed winner, or
     * null (recorded as rejected).
     */
    const confirmSideBySide = async (id: string, settings: TrackSettings, change: string, m: Measurement): Promise<Winner | null> => {
      const current = incumbent!;
      let pair: PairedMeasurement;
      try {
        pair = await measurePairOnce(current, settings);
      } catch (err) {
        finishCandidate(db, id, { verdict: "rejected", reason: `its side-by-side measurement failed: ${message(err)}` });
        return null;
      }
      // Load time and RSS are not measured side by side (two models share the process): each side keeps its own earlier figures.
      const incumbentMetrics = { ...current.metrics, ...pair.incumbent.metrics };
      const beside = startCandidate(db, { runId, slug, settings: current.settings, change: "", machine: machineFor(current.settings), artifactId: current.artifactId });
      finishCandidate(db, beside, { verdict: "incumbent", reason: `measured side by side with ${change} (${pair.passes.length} alternating passes)`, artifactId: pair.incumbent.artifactId, metrics: incumbentMetrics, quality: pair.incumbent.quality });
      current.samples.push(incumbentMetrics);
      current.metrics = meanMetrics(current.samples);
      current.spread = widerSpread(current.spread, sampleSpread(current.samples));
      sinceIncumbent = 0;
      const verdict = judgePaired(pairedGains(pair.passes, rule.metrics), m.quality, rule, job.quality);
      const metrics = { ...m.metrics, ...pair.candidate.metrics };
      if (!verdict.wins) {
        finishCandidate(db, id, { verdict: "rejected", reason: `did not hold side by side: ${verdict.reason}`, metrics });
        log(`${slug}: ${change}: not confirmed (${verdict.reason})`);
        return null;
      }
      finishCandidate(db, id, { verdict: "running", reason: `${verdict.reason} (confirmed; the round's best is promoted)`, metrics, open: true });
      log(`${slug}: ${change}: confirmed (${verdict.reason})`);
      return { id, settings, artifactId: m.artifactId, quality: m.quality, samples: [m.metrics, metrics], metrics, spread: relativeSpread(m.metrics, metrics), score: verdict.score, reason: verdict.reason, change };
    };
    let tried = triedSettings(db, slug, current?.createdAt ?? null);
    let losers = losingSettings(db, slug, current?.createdAt ?? null);
    for (;;) {
      const candidates = generateCandidates(incumbent.settings, job.searchSpace, { threadBudget, tried, losers, losingChanges: losingChanges(db, slug) });
      if (candidates.length === 0) {
        ended = "nothing left to try around the incumbent";
        break;
      }
      // Winners confirmed by a second measurement, waiting for the round's end.
      const winners: Winner[] = [];
      let stop: string | null = null;
      for (const settings of candidates) {
        if (options.signal?.aborted) {
          stop = "stopped";
          break;
        }
        if (measured >= maxCandidates) {
          stop = `measured maxCandidates (${maxCandidates})`;
          break;
        }
        // Its part that lost alone (earlier this round) would only drag the other down.
        if (builtOnLoser(incumbent.settings, settings, losers)) continue;
        // Room for this measurement and, should it win, its confirmation (the incumbent and it again,
        // or both side by side: twice the passes of two models, about four measurements).
        if (deadline - clock() < (sideBySide ? 5 : 3) * estimateMs) {
          stop = "the time budget";
          break;
        }
        if (job.promotion.remeasureEvery > 0 && sinceIncumbent >= job.promotion.remeasureEvery) {
          if (deadline - clock() < 4 * estimateMs) {
            stop = "the time budget";
            break;
          }
          const again = await remeasureIncumbent(`measured again after ${sinceIncumbent} candidates (drift)`);
          if (again) log(`${slug}: incumbent again: ${fmt(again.metrics, again.quality)}; noise now ${spreadLine(incumbent.spread)}`);
        }
        measured++;
        sinceIncumbent++;
        const change = describeChange(incumbent.settings, settings);
        const id = startCandidate(db, { runId, slug, settings, change, machine: machineFor(settings) });
        tried.set(settingsKey(settings), new Date().toISOString());
        let m: Measurement;
        try {
          m = await measureOnce(settings);
        } catch (err) {
          finishCandidate(db, id, { verdict: "failed", reason: message(err) });
          losers.add(settingsKey(settings));
          log(`${slug}: ${change}: failed: ${message(err)}`);
          continue;
        }
        // With side-by-side confirmation, the first measurement only screens: any gain past minGain
        // goes on to the pair, which alone can tell a real 10% from the machine's drift, and only a
        // loss past noiseFactor x the spread (the margin a win needed before) stops it here.
        const first = sideBySide
          ? judge({ metrics: incumbent.metrics, spread: scaleSpread(incumbent.spread, rule.noiseFactor) }, m, { ...rule, noiseFactor: 0 }, job.quality)
          : judge(incumbent, m, rule, job.quality);
        log(`${slug}: ${change}: ${fmt(m.metrics, m.quality)}: ${first.wins ? (sideBySide ? "passes the screen; measuring it side by side with the incumbent" : "wins; measuring it again") : "rejected"} (${first.reason})`);
        if (!first.wins) {
          finishCandidate(db, id, { verdict: "rejected", reason: first.reason, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality });
          if (lost("rejected", first.reason)) losers.add(settingsKey(settings));
          continue;
        }
        // ── confirmation: the incumbent and the winner measured again, back to back, so that a change
        // in the machine's load since the incumbent's repeats cannot make the win; both the mean of
        // all measurements and this pair alone must win, so one lucky sample cannot carry it ──
        finishCandidate(db, id, { verdict: "running", reason: `${first.reason} (being confirmed)`, artifactId: m.artifactId, metrics: m.metrics, quality: m.quality, open: true });
        if (sideBySide) {
          const winner = await confirmSideBySide(id, settings, change, m);
          if (winner) winners.push(winner);
          continue;
        }
        const fresh = await remeasureIncumbent(`measured again beside ${change}`);
        if (!fresh) {
          finishCandidate(db, id, { verdict: "rejected", reason: "the incumbent could not be measured again to confirm it" });
          continue;
        }
        let second: Measurement;
        try {
          second = await measureOnce(settings);
        } catch (err) {
          finishCandidate(db, id, { verdict: "rejected", reason: `its confirming measurement failed: ${message(err)}` });
          continue;
        }
        const metrics = meanMetrics([m.metrics, second.metrics]);
        const mean = judge(incumbent, { metrics, quality: m.quality }, rule, job.quality);
        const paired = judge({ metrics: fresh.metrics, spread: incumbent.spread }, { metrics: second.metrics, quality: m.quality }, rule, job.quality);
        if (!(mean.wins && paired.wins)) {
          const why = mean.wins ? `beside the incumbent measured again: ${paired.reason}` : mean.reason;
          finishCandidate(db, id, { verdict: "rejected", reason: `did not hold on a second measurement: ${why}`, metrics });
          log(`${slug}: ${change}: not confirmed (${why})`);
          continue;
        }
        finishCandidate(db, id, { verdict: "running", reason: `${mean.reason} (confirmed; the round's best is promoted)`, metrics, open: true });
        log(`${slug}: ${change}: confirmed (${mean.reason})`);
        winners.push({ id, settings, artifactId: m.artifactId, quality: m.quality, samples: [m.metrics, second.metrics], metrics, spread: relativeSpread(m.metrics, second.metrics), score: mean.score, reason: mean.reason, change });
      }
      if (winners.length === 0) {
        ended = stop ?? "no candidate won this round";
        break;
      }

      // ── promote the round's best confirmed winner; the next round starts from it ──
      winners.sort((a, b) => b.score - a.score);
      const [best, ...rest] = winners;
      for (const other of rest) finishCandidate(db, other.id, { verdict: "rejected", reason: `won (${other.reason}), but ${best.change} gained more and was promoted` });
      const reason = `track: ${best.change}: ${best.reason}${sideBySide ? "" : " (mean of 2 measurements)"}`;
      const promotion = promoteArtifact(db, { slug, artifactId: best.artifactId, settings: servingSettings(best.settings), metrics: best.metrics, quality: { ...best.quality }, reason });
      promoted.push(promotion);
      finishCandidate(db, best.id, { verdict: "promoted", reason: best.reason });
      log(`${slug}: promoted ${best.artifactId} with ${best.change}: ${best.reason}`);
      incumbent = {
        artifactId: best.artifactId,
        settings: best.settings,
        samples: [...best.samples],
        metrics: best.metrics,
        spread: widerSpread(incumbent.spread, best.spread),
        quality: best.quality,
      };
      tried = new Map();
      losers = new Set();
      if (stop) {
        ended = stop;
        break;
      }
    }
    return summary();
  } catch (err) {
    ended = `error: ${message(err)}`;
    throw err;
  } finally {
    // Whatever is still open belongs to this run and will not be finished by it.
    for (const record of listCandidates(db, slug).filter((r) => r.runId === runId && r.verdict === "running")) {
      finishCandidate(db, record.id, { verdict: "failed", reason: `the run ended (${ended}) before this was decided` });
    }
    log(`${slug}: track run ${runId.slice(0, 8)} ended after ${((clock() - started) / 1000).toFixed(0)} s: ${ended}; ${promoted.length} promotion(s)`);
  }

  function summary(): TrackRunSummary {
    return {
      runId,
      slug,
      incumbent,
      records: listCandidates(db, slug).filter((r) => r.runId === runId),
      promoted,
      ended,
      seconds: (clock() - started) / 1000,
    };
  }
}
