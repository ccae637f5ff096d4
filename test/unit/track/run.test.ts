/** A track run over a fake measurer: records, noise, promotion, confirmation, rollback, failures kept apart. */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase, type KilnDatabase } from "../../../src/catalogue/db.js";
import { currentPromotion, promoteArtifact, rollbackPromotion } from "../../../src/catalogue/promotions.js";
import {
  claimRun,
  DEFAULT_SETTINGS,
  finishCandidate,
  listCandidates,
  losingChanges,
  markAbandoned,
  RunInProgressError,
  runTrack,
  startCandidate,
  trackHistory,
} from "../../../src/track/index.js";
import { fakeMeasurer, OTHER_SLUG, pairedFakeMeasurer, SLUG, testJob } from "./fakes.js";

let db: KilnDatabase;
beforeEach(() => {
  db = openDatabase({ path: ":memory:" });
});
afterEach(() => db.close());

const faster = (s: { prefillChunk: number; accuracyLevel: number }) => (s.prefillChunk === 128 ? { metrics: { prefill_tokens_per_second: 1000 } } : {});

describe("runTrack", () => {
  it("measures the incumbent twice, records every candidate, and promotes a confirmed winner with its reason", async () => {
    const measurer = fakeMeasurer(faster);
    const lines: string[] = [];
    const summary = await runTrack(testJob({ maxCandidates: 6 }), { db, measurer, log: (l) => lines.push(l) });

    const records = listCandidates(db, SLUG);
    expect(records.map((r) => [r.change, r.verdict])).toEqual([
      ["", "incumbent"],
      ["", "incumbent"],
      ["accuracyLevel 4→0", "rejected"],
      ["prefillChunk 256→128", "promoted"],
      // A winner is confirmed by measuring the incumbent and it again, back to back.
      ["", "incumbent"],
      ["prefillChunk 256→512", "rejected"],
      ["accuracyLevel 4→0, prefillChunk 256→128", "rejected"],
      ["", "incumbent"],
      ["accuracyLevel 4→0, prefillChunk 256→512", "rejected"],
      // The next round starts from the promoted settings.
      ["accuracyLevel 4→0", "rejected"],
    ]);
    expect(records[4].reason).toBe("measured again beside prefillChunk 256→128");
    expect(records[6].reason).toMatch(/^won \(faster: prefill \+25\.0% .*\), but prefillChunk 256→128 gained more and was promoted$/);
    expect(records[9].settings).toMatchObject({ accuracyLevel: 0, prefillChunk: 128 });
    expect(records.every((r) => r.runId === summary.runId && r.finishedAt !== null)).toBe(true);
    expect(records[0]).toMatchObject({ artifactId: `${SLUG}-acc4`, machine: { cpu: "fake", pid: process.pid, threads: 2, threadBudget: 2 } });
    expect(records[2].artifactId).toBe(`${SLUG}-acc0`);
    expect(records[2].reason).toMatch(/^no gain beyond noise: decode \+0\.0%/);
    expect(records[3].reason).toMatch(/^faster: prefill \+25\.0% \(threshold \+3\.0%\)/);
    expect(measurer.requests.map((r) => r.settings.prefillChunk)).toEqual([256, 256, 256, 128, 256, 128, 512, 128, 256, 128, 512, 128]);

    const current = currentPromotion(db, SLUG)!;
    expect(current).toMatchObject({ artifactId: `${SLUG}-acc4`, metrics: { prefill_tokens_per_second: 1000 }, quality: { kl_divergence: 0.01 } });
    // Only runtime and serving settings go with a promotion: the compile options are the artifact.
    expect(current.settings).toEqual({ threads: 2, graphOptimizationLevel: "all", prefillChunk: 128, maxRunning: 16, stepTokens: 512 });
    expect(current.reason).toMatch(/^track: prefillChunk 256→128: faster: prefill \+25\.0%.*\(mean of 2 measurements\)$/);
    expect(summary.promoted).toHaveLength(1);
    expect(summary.ended).toBe("measured maxCandidates (6)");
    expect(lines.some((l) => l.includes("noise (incumbent repeat spread)"))).toBe(true);
  });

  it("starts from the current promotion: its artifact, its settings and its artifact's compile options", async () => {
    promoteArtifact(db, { slug: SLUG, artifactId: `${SLUG}-acc0`, settings: { prefillChunk: 512, threads: 1 }, reason: "operator" });
    const measurer = fakeMeasurer();
    await runTrack(testJob({ maxCandidates: 1 }), { db, measurer });
    expect(measurer.requests[0]).toMatchObject({
      artifactId: `${SLUG}-acc0`,
      threads: 1,
      settings: { ...DEFAULT_SETTINGS, accuracyLevel: 0, prefillChunk: 512, threads: 1 },
    });
    // The first candidate changes one setting of that incumbent.
    expect(listCandidates(db, SLUG).at(-1)!.change).toBe("accuracyLevel 0→4");
  });

  it("does not promote a gain within the noise, nor a faster candidate outside the quality budget", async () => {
    // Incumbent repeats 100 and 90 decode tokens/s: a 10.5% spread, so a win needs +21%.
    const measurer = fakeMeasurer((s, call) => {
      if (call === 2) return { metrics: { decode_tokens_per_second: 90 } };
      if (s.prefillChunk === 128) return { metrics: { decode_tokens_per_second: 110 } };
      if (s.accuracyLevel === 0) return { metrics: { decode_tokens_per_second: 150 }, quality: { kl_divergence: 0.2, perplexity_ratio: 1.3 } };
      return {};
    });
    const summary = await runTrack(testJob({ maxCandidates: 3 }), { db, measurer });
    const rows = listCandidates(db, SLUG);
    expect(rows.find((r) => r.change === "prefillChunk 256→128")!.reason).toMatch(/^no gain beyond noise: decode \+15\.8% \(needs \+21\.1%\)/);
    expect(rows.find((r) => r.change === "accuracyLevel 4→0")!.reason).toBe("outside the quality budget: KL 0.200 over the budget of 0.03");
    expect(rows.filter((r) => r.verdict === "promoted")).toHaveLength(0);
    expect(currentPromotion(db, SLUG)).toBeNull();
    expect(summary.ended).toBe("measured maxCandidates (3)");
  });

  it("rejects a candidate that loses beyond the noise on another promotion metric", async () => {
    const measurer = fakeMeasurer((s) => (s.prefillChunk === 512 ? { metrics: { prefill_tokens_per_second: 1200, decode_tokens_per_second: 80 } } : {}));
    await runTrack(testJob({ maxCandidates: 3 }), { db, measurer });
    expect(listCandidates(db, SLUG).find((r) => r.change === "prefillChunk 256→512")!.reason).toBe("slower: decode −20.0% (beyond −3.0%)");
  });

  it("rejects a winner whose confirming measurement does not hold", async () => {
    let seen = 0;
    const measurer = fakeMeasurer((s) =>
      s.prefillChunk === 128 && seen++ === 0
        ? { metrics: { prefill_tokens_per_second: 1000 } }
        : s.prefillChunk === 128
          ? { metrics: { prefill_tokens_per_second: 500 } }
          : {},
    );
    await runTrack(testJob({ maxCandidates: 3 }), { db, measurer });
    const row = listCandidates(db, SLUG).find((r) => r.change === "prefillChunk 256→128")!;
    expect(row.verdict).toBe("rejected");
    expect(row.reason).toMatch(/^did not hold on a second measurement: slower: prefill −6\.3%/);
    expect(currentPromotion(db, SLUG)).toBeNull();
  });

  it("does not promote a winner that loses its lead when it and the incumbent are measured again, and confirms the next one", async () => {
    let bigCalls = 0;
    const measurer = fakeMeasurer((s) => {
      // prefillChunk 128: +30% once, then +1% beside the incumbent measured again (its mean, +15.5%, would still pass).
      if (s.prefillChunk === 128) return { metrics: { decode_tokens_per_second: bigCalls++ === 0 ? 130 : 101 } };
      if (s.accuracyLevel === 0) return { metrics: { decode_tokens_per_second: 110 } };
      return {};
    });
    await runTrack(testJob({ maxCandidates: 3, searchSpace: { accuracyLevel: [4, 0], prefillChunk: [128, 256] } }), { db, measurer });
    const rows = listCandidates(db, SLUG);
    expect(rows.find((r) => r.change === "prefillChunk 256→128")).toMatchObject({
      verdict: "rejected",
      reason:
        "did not hold on a second measurement: beside the incumbent measured again: no gain beyond noise: decode +1.0% (needs +3.0%), prefill +0.0% (needs +3.0%), batch16 +0.0% (needs +3.0%)",
    });
    expect(rows.find((r) => r.change === "accuracyLevel 4→0")!.verdict).toBe("promoted");
    expect(currentPromotion(db, SLUG)!.artifactId).toBe(`${SLUG}-acc0`);
  });

  it("ranks several winners of a round and promotes the one that gained most", async () => {
    const measurer = fakeMeasurer((s) =>
      s.accuracyLevel === 0 ? { metrics: { decode_tokens_per_second: 110 } } : s.prefillChunk === 128 ? { metrics: { decode_tokens_per_second: 130 } } : {},
    );
    await runTrack(testJob({ maxCandidates: 3, searchSpace: { accuracyLevel: [4, 0], prefillChunk: [128, 256] } }), { db, measurer });
    const rows = listCandidates(db, SLUG);
    expect(rows.find((r) => r.change === "accuracyLevel 4→0")).toMatchObject({
      verdict: "rejected",
      reason: expect.stringMatching(/^won \(faster: decode \+10\.0%.*\), but prefillChunk 256→128 gained more and was promoted$/),
    });
    expect(rows.find((r) => r.change === "prefillChunk 256→128")!.verdict).toBe("promoted");
  });

  it("records a candidate that throws or overruns its time slice as failed, and goes on", async () => {
    const measurer = fakeMeasurer((s) => (s.accuracyLevel === 0 ? new Error("onnxruntime: bad graph\nstack...") : s.prefillChunk === 128 ? "hang" : {}));
    const summary = await runTrack(testJob({ maxCandidates: 3, candidateMinutes: 0.002 }), { db, measurer });
    const rows = listCandidates(db, SLUG);
    expect(rows.find((r) => r.change === "accuracyLevel 4→0")).toMatchObject({ verdict: "failed", reason: "onnxruntime: bad graph", artifactId: "" });
    expect(rows.find((r) => r.change === "prefillChunk 256→128")).toMatchObject({ verdict: "failed" });
    expect(rows.find((r) => r.change === "prefillChunk 256→128")!.reason).toMatch(/^exceeded its time slice of 0 s \(candidateMinutes 0\.002\)$/);
    // The hung measurement was told to stop (its signal aborted) and let go of its model.
    expect(measurer.released).toBe(1);
    expect(rows.find((r) => r.change === "prefillChunk 256→512")!.verdict).toBe("rejected");
    expect(summary.incumbent).not.toBeNull();
  });

  it("gives up on a hung measurement that ignores its abort after the grace period", async () => {
    const measurer = fakeMeasurer((s) => (s.prefillChunk === 128 ? (new Promise<never>(() => {}) as never) : {}));
    // A measurement that never settles, whatever its signal says.
    measurer.measure = ((original) => (request) => (request.settings.prefillChunk === 128 ? new Promise(() => {}) : original(request)))(
      measurer.measure.bind(measurer),
    );
    const started = Date.now();
    await runTrack(testJob({ maxCandidates: 2, candidateMinutes: 0.001, searchSpace: { prefillChunk: [128, 256, 512] } }), {
      db,
      measurer,
      cleanupGraceSeconds: 0.05,
    });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(listCandidates(db, SLUG).map((r) => r.verdict)).toEqual(["incumbent", "incumbent", "failed", "rejected"]);
  });

  it("ends without candidates when the incumbent cannot be measured twice", async () => {
    const measurer = fakeMeasurer((_, call) => (call === 1 ? new Error("out of memory") : {}));
    const summary = await runTrack(testJob(), { db, measurer });
    expect(summary.incumbent).toBeNull();
    expect(summary.ended).toMatch(/^the incumbent could not be measured twice/);
    expect(listCandidates(db, SLUG).map((r) => [r.verdict, r.reason])).toEqual([
      ["failed", "incumbent repeat 1: out of memory"],
      ["incumbent", "repeat 2 (noise)"],
    ]);
  });

  it("measures a noisy incumbent a third time, judges by its two closest repeats, and judges nothing when none agree", async () => {
    // Decode 100, then 60 (a busy moment), then 98: the first and third agree within maxNoise.
    const decode = [100, 60, 98];
    const rescued = fakeMeasurer((_, call) => (call <= 3 ? { metrics: { decode_tokens_per_second: decode[call - 1] } } : {}));
    const lines: string[] = [];
    const summary = await runTrack(testJob({ maxCandidates: 1 }), { db, measurer: rescued, log: (l) => lines.push(l) });
    expect(lines).toContain(`${SLUG}: the incumbent's repeats differ by decode 50.0%, past maxNoise: measuring it a third time`);
    expect(summary.incumbent!.metrics.decode_tokens_per_second).toBe(99);
    expect(
      listCandidates(db, SLUG)
        .map((r) => r.reason)
        .slice(0, 3),
    ).toEqual(["repeat 1 (noise)", "repeat 2 (noise)", "repeat 3 (the first two were further apart than maxNoise)"]);

    const busy = [100, 60, 140];
    const hopeless = fakeMeasurer((_, call) => ({ metrics: { decode_tokens_per_second: busy[(call - 1) % 3] } }));
    const noisy = await runTrack(testJob({ slug: OTHER_SLUG }), { db, measurer: hopeless });
    expect(noisy.ended).toBe("too noisy to judge: the incumbent's closest repeats differ by decode 33.3% (maxNoise 25%); nothing measured or promoted");
    expect(hopeless.requests).toHaveLength(3);
    expect(currentPromotion(db, OTHER_SLUG)).toBeNull();
  });

  it("stops starting candidates when the budget would not fit one and its confirmation", async () => {
    let t = 0;
    const measurer = fakeMeasurer();
    const inner = measurer.measure.bind(measurer);
    measurer.measure = async (request) => {
      t += 60_000; // every measurement takes a minute on this clock
      return inner(request);
    };
    const summary = await runTrack(testJob({ budgetMinutes: 6 }), { db, measurer, clock: () => t });
    // 2 incumbent minutes; a candidate needs room for 3 (itself, then the incumbent and it again should it win): two fit.
    expect(listCandidates(db, SLUG).map((r) => r.verdict)).toEqual(["incumbent", "incumbent", "rejected", "rejected"]);
    expect(summary.ended).toBe("the time budget");
  });

  it("stops after the measurement in progress when its signal is aborted", async () => {
    const stop = new AbortController();
    const measurer = fakeMeasurer((s) => {
      if (s.accuracyLevel === 0) stop.abort(new Error("stopped by SIGTERM"));
      return s.accuracyLevel === 0 ? "hang" : {};
    });
    const summary = await runTrack(testJob(), { db, measurer, signal: stop.signal });
    const rows = listCandidates(db, SLUG);
    expect(rows.at(-1)).toMatchObject({ change: "accuracyLevel 4→0", verdict: "failed", reason: "stopped by SIGTERM" });
    expect(rows).toHaveLength(3);
    expect(summary.ended).toBe("stopped");
  });

  it("skips pairs built on a change that lost alone, in the same run and the next", async () => {
    const measurer = fakeMeasurer((s) => (s.accuracyLevel === 0 ? { metrics: { decode_tokens_per_second: 10 } } : {}));
    await runTrack(testJob({ maxCandidates: 10 }), { db, measurer });
    const changes = listCandidates(db, SLUG)
      .map((r) => r.change)
      .filter(Boolean);
    expect(changes).toEqual(["accuracyLevel 4→0", "prefillChunk 256→128", "prefillChunk 256→512"]);
    await runTrack(testJob({ maxCandidates: 10 }), { db, measurer: fakeMeasurer() });
    // Everything left was tried: the singles again, longest ago first but the loser last, and still no pair on it.
    expect(
      listCandidates(db, SLUG)
        .slice(5 + 2)
        .map((r) => r.change),
    ).toEqual(["prefillChunk 256→128", "prefillChunk 256→512", "accuracyLevel 4→0"]);
  });

  it("puts settings tried against this incumbent at the back of the next night's line", async () => {
    await runTrack(testJob({ maxCandidates: 1 }), { db, measurer: fakeMeasurer() });
    const second = fakeMeasurer();
    await runTrack(testJob({ maxCandidates: 1 }), { db, measurer: second });
    expect(
      listCandidates(db, SLUG)
        .filter((r) => r.change !== "")
        .map((r) => r.change),
    ).toEqual(["accuracyLevel 4→0", "prefillChunk 256→128"]);
  });

  it("keeps one model's failures and promotions away from another model's track", async () => {
    const broken = fakeMeasurer(() => new Error("worker crashed"));
    await runTrack(testJob({ slug: OTHER_SLUG, maxCandidates: 2 }), { db, measurer: broken });
    await runTrack(testJob({ maxCandidates: 3 }), { db, measurer: fakeMeasurer(faster) });
    expect(listCandidates(db, OTHER_SLUG).every((r) => r.verdict === "failed")).toBe(true);
    expect(currentPromotion(db, OTHER_SLUG)).toBeNull();
    expect(currentPromotion(db, SLUG)!.settings.prefillChunk).toBe(128);
    expect(listCandidates(db, SLUG).filter((r) => r.verdict === "failed")).toHaveLength(0);
  });

  it("rollback restores the promotion before the track's", async () => {
    promoteArtifact(db, { slug: SLUG, artifactId: `${SLUG}-acc4`, settings: {}, reason: "operator" });
    await runTrack(testJob({ maxCandidates: 3 }), { db, measurer: fakeMeasurer(faster) });
    expect(currentPromotion(db, SLUG)!.reason).toMatch(/^track: /);
    const restored = rollbackPromotion(db, SLUG);
    expect(restored).toMatchObject({ artifactId: `${SLUG}-acc4`, reason: "operator" });
    expect(currentPromotion(db, SLUG)!.reason).toBe("operator");
    // The history keeps the track's promoted candidate.
    expect(trackHistory(db, SLUG).candidates.some((c) => c.verdict === "promoted")).toBe(true);
  });
});

describe("track records", () => {
  const machine = (pid: number) => ({ pid });

  it("refuses a second run of a model while a live process is measuring it, and takes over a dead one's", () => {
    const dead = 2 ** 22 + 12345;
    const alive = (pid: number) => pid !== dead;
    startCandidate(db, { runId: "r0", slug: SLUG, settings: DEFAULT_SETTINGS, change: "", machine: machine(dead) });
    claimRun(db, { runId: "r1", slug: SLUG, settings: DEFAULT_SETTINGS, change: "", machine: machine(4242) }, alive);
    expect(listCandidates(db, SLUG)[0]).toMatchObject({ verdict: "failed", reason: `the track process (${dead}) ended while this was being measured` });
    expect(() => claimRun(db, { runId: "r2", slug: SLUG, settings: DEFAULT_SETTINGS, change: "", machine: machine(4343) }, alive)).toThrow(RunInProgressError);
    // Another model is not in the way.
    expect(() => claimRun(db, { runId: "r3", slug: OTHER_SLUG, settings: DEFAULT_SETTINGS, change: "", machine: machine(4343) }, alive)).not.toThrow();
  });

  it("marks what a dead track process left running as failed, with the scheduler's reason", () => {
    startCandidate(db, { runId: "r", slug: SLUG, settings: DEFAULT_SETTINGS, change: "", machine: machine(2 ** 22 + 1) });
    expect(markAbandoned(db, SLUG, "the track process ended (signal SIGSEGV)", () => false)).toBe(1);
    expect(listCandidates(db, SLUG)[0]).toMatchObject({ verdict: "failed", reason: "the track process ended (signal SIGSEGV)" });
    expect(listCandidates(db, SLUG)[0].finishedAt).not.toBeNull();
  });

  it("reports history in the documented JSON shape", async () => {
    await runTrack(testJob({ maxCandidates: 3 }), { db, measurer: fakeMeasurer(faster) });
    const history = trackHistory(db, SLUG);
    expect(Object.keys(history)).toEqual(["slug", "current", "candidates"]);
    expect(history.current).toMatchObject({ artifact: `${SLUG}-acc4`, settings: { prefillChunk: 128 } });
    expect(history.candidates[0]).toEqual({
      artifact: `${SLUG}-acc4`,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      settings: { ...DEFAULT_SETTINGS },
      metrics: { decode_tokens_per_second: 100, prefill_tokens_per_second: 800, batch16_tokens_per_second: 400, ttft_ms: 50, peak_rss_mb: 500 },
      quality: { kl_divergence: 0.01, perplexity_ratio: 1.001 },
      verdict: "incumbent",
      reason: "repeat 1 (noise)",
      change: "",
      run: expect.any(String),
    });
    expect(trackHistory(db, SLUG, 2).candidates).toHaveLength(2);
  });
});

describe("drift during a run", () => {
  it("measures the incumbent again every remeasureEvery candidates, and judges later ones by the wider spread", async () => {
    // The machine slows by a fifth from the 7th measurement on: incumbent and candidates alike.
    const measurer = fakeMeasurer((_, call) => (call >= 7 ? { metrics: { decode_tokens_per_second: 80 } } : {}));
    const lines: string[] = [];
    const job = testJob({ maxCandidates: 7, searchSpace: { prefillChunk: [64, 128, 256, 512], maxRunning: [8, 16, 32] } });
    await runTrack(job, { db, measurer, log: (l) => lines.push(l) });
    const records = listCandidates(db, SLUG);
    const again = records.findIndex((r) => r.reason === "measured again after 4 candidates (drift)");
    expect(again).toBe(6); // two repeats, four candidates, then the incumbent
    expect(records[again].metrics.decode_tokens_per_second).toBe(80);
    expect(lines.some((l) => /incumbent again: .*; noise now .*decode 2\d\.\d%/.test(l))).toBe(true);
    // Later candidates are as slow as the incumbent now is: within the noise, not "slower".
    const later = records.slice(again + 1).filter((r) => r.change !== "");
    expect(later.length).toBeGreaterThan(0);
    for (const r of later) expect(r.reason).toMatch(/^no gain beyond noise/);

    // Without re-measuring, the same drift reads as a loss.
    db.close();
    db = openDatabase({ path: ":memory:" });
    const blind = fakeMeasurer((_, call) => (call >= 7 ? { metrics: { decode_tokens_per_second: 80 } } : {}));
    await runTrack(testJob({ maxCandidates: 7, searchSpace: job.searchSpace, promotion: { ...job.promotion, remeasureEvery: 0 } }), {
      db,
      measurer: blind,
      log: () => {},
    });
    expect(
      listCandidates(db, SLUG)
        .filter((r) => r.change !== "")
        .at(-1)!.reason,
    ).toMatch(/^slower: decode −20\.0%/);
  });
});

describe("losingChanges", () => {
  it("lists the one-setting changes that lost outright, under any incumbent, and nothing else", () => {
    const record = (change: string, verdict: "rejected" | "failed", reason: string) => {
      const id = startCandidate(db, { runId: "r", slug: SLUG, settings: DEFAULT_SETTINGS, change, machine: { pid: process.pid } });
      finishCandidate(db, id, { verdict, reason, metrics: {}, quality: null });
    };
    record("accuracyLevel 4→0", "rejected", "slower: decode −91.7% (beyond −3.0%)");
    record("lmHead source→4bit", "rejected", "outside the quality budget: KL 0.111 over the budget of 0.03");
    record("threads 2→1", "failed", "measurement timed out");
    record("prefillChunk 256→128", "rejected", "no gain beyond noise: prefill +1.0% (needs +3.0%)");
    record("minFold matmul→8bit, prefillChunk 256→512", "rejected", "slower: batch16 −7.5% (beyond −3.0%)");
    expect(Object.fromEntries([...losingChanges(db, SLUG)].sort())).toEqual({ "accuracyLevel=0": 0.917, "lmHead=4bit": 1, "threads=1": 0 });
    expect(losingChanges(db, OTHER_SLUG).size).toBe(0);
  });
});

describe("side-by-side confirmation (Measurer.measurePair)", () => {
  // The incumbent's repeats differ by 11% (decode 100 and 112): judged one measurement at a time, a
  // gain needs twice that. prefillChunk 128 measures decode 110, inside that noise, but beside the
  // incumbent it gains in every pass.
  const screened = (s: { prefillChunk: number }, call: number) =>
    call === 2 ? { metrics: { decode_tokens_per_second: 112 } } : s.prefillChunk === 128 ? { metrics: { decode_tokens_per_second: 110 } } : {};
  const incumbentPasses = [100, 104, 98, 102, 100, 101];

  it("promotes a gain within the incumbent's repeat noise when every alternating pass shows it, and records the incumbent's side-by-side figures", async () => {
    const measurer = pairedFakeMeasurer(screened, () => ({ incumbent: incumbentPasses, candidate: [110, 114, 108, 112, 111, 110] }));
    const summary = await runTrack(testJob({ maxCandidates: 2 }), { db, measurer });
    const records = listCandidates(db, SLUG);
    expect(records.map((r) => [r.change, r.verdict])).toEqual([
      ["", "incumbent"],
      ["", "incumbent"],
      ["accuracyLevel 4→0", "rejected"],
      ["prefillChunk 256→128", "promoted"],
      ["", "incumbent"],
    ]);
    expect(records[4].reason).toBe("measured side by side with prefillChunk 256→128 (6 alternating passes)");
    expect(records[4].metrics).toMatchObject({ decode_tokens_per_second: 101 });
    expect(records[3].reason).toMatch(/^faster beside the incumbent, median of 6 alternating passes: decode \+9\.\d% \(threshold \+3\.0%\)/);
    // Its figures are the side-by-side ones; load time and RSS come from its own measurement.
    expect(records[3].metrics).toMatchObject({ decode_tokens_per_second: 111, peak_rss_mb: 500 });
    expect(measurer.pairs.map((s) => s.prefillChunk)).toEqual([128]);
    // One sequential measurement of it, none of the incumbent again: the pair replaced both.
    expect(measurer.requests.map((r) => r.settings.prefillChunk)).toEqual([256, 256, 256, 128]);
    expect(summary.promoted).toHaveLength(1);
    expect(currentPromotion(db, SLUG)!.reason).toMatch(/^track: prefillChunk 256→128: faster beside the incumbent/);
  });

  it("the same first measurement judged alone, without a pair, is noise", async () => {
    await runTrack(testJob({ maxCandidates: 2 }), { db, measurer: fakeMeasurer(screened) });
    const records = listCandidates(db, SLUG);
    expect(records[3]).toMatchObject({ change: "prefillChunk 256→128", verdict: "rejected" });
    expect(records[3].reason).toMatch(/^no gain beyond noise: decode \+3\.8% \(needs \+22\.\d%\)/);
  });

  it("the screen stops a candidate only for a loss past noiseFactor x the spread; the pair judges the rest", async () => {
    // batch16 spread 9.5% (400 and 440); the candidate's first batch16 is 11.9% under their mean.
    const outcome = (s: { prefillChunk: number }, call: number) =>
      call === 2
        ? { metrics: { decode_tokens_per_second: 112, batch16_tokens_per_second: 440 } }
        : s.prefillChunk === 128
          ? { metrics: { decode_tokens_per_second: 110, batch16_tokens_per_second: 370 } }
          : {};
    const measurer = pairedFakeMeasurer(outcome, () => ({ incumbent: incumbentPasses, candidate: [110, 114, 108, 112, 111, 110] }));
    await runTrack(testJob({ maxCandidates: 2 }), { db, measurer });
    expect(listCandidates(db, SLUG).find((r) => r.change === "prefillChunk 256→128")!.verdict).toBe("promoted");
    db.close();
    db = openDatabase({ path: ":memory:" });
    await runTrack(testJob({ maxCandidates: 2 }), { db, measurer: fakeMeasurer(outcome) });
    expect(listCandidates(db, SLUG).find((r) => r.change === "prefillChunk 256→128")!.reason).toMatch(/^slower: batch16 −11\.9%/);
  });

  it("rejects a winner whose passes disagree (the median gain within the passes' noise)", async () => {
    const measurer = pairedFakeMeasurer(screened, () => ({ incumbent: [100, 100, 100, 100, 100, 100], candidate: [125, 80, 120, 85, 118, 90] }));
    const summary = await runTrack(testJob({ maxCandidates: 2 }), { db, measurer });
    const row = listCandidates(db, SLUG).find((r) => r.change === "prefillChunk 256→128")!;
    expect(row.verdict).toBe("rejected");
    expect(row.reason).toMatch(
      /^did not hold side by side: no gain beyond noise beside the incumbent, median of 6 alternating passes: decode \+4\.0% \(needs \+2\d\.\d%\)/,
    );
    expect(summary.promoted).toHaveLength(0);
  });

  it("rejects a winner that loses on another metric in every pass", async () => {
    const measurer = pairedFakeMeasurer(screened, () => ({
      incumbent: incumbentPasses,
      candidate: [110, 114, 108, 112, 111, 110],
      batch16: [360, 362, 358, 361, 359, 360],
    }));
    await runTrack(testJob({ maxCandidates: 2 }), { db, measurer });
    const row = listCandidates(db, SLUG).find((r) => r.change === "prefillChunk 256→128")!;
    expect(row).toMatchObject({ verdict: "rejected" });
    expect(row.reason).toMatch(/^did not hold side by side: slower beside the incumbent, median of 6 alternating passes: batch16 −10\.0%/);
    expect(currentPromotion(db, SLUG)).toBeNull();
  });
});
