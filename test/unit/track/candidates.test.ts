/** Candidates around the incumbent: one or two settings changed, nearest values first, tried ones last. */
import { describe, expect, it } from "vitest";
import { builtOnLoser, DEFAULT_SETTINGS, describeChange, generateCandidates, settingsKey, type TrackSettings } from "../../../src/track/index.js";

const changes = (from: TrackSettings, list: TrackSettings[]) => list.map((c) => describeChange(from, c));

describe("generateCandidates", () => {
  const space = { accuracyLevel: [4, 0], prefillChunk: [64, 128, 256, 512], maxRunning: [16, 32] };

  it("changes one setting at a time, nearest values first, then pairs of adjacent steps", () => {
    expect(changes(DEFAULT_SETTINGS, generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2 }))).toEqual([
      "accuracyLevel 4→0",
      "prefillChunk 256→128",
      "prefillChunk 256→512",
      "maxRunning 16→32",
      "prefillChunk 256→64",
      "accuracyLevel 4→0, prefillChunk 256→128",
      "accuracyLevel 4→0, prefillChunk 256→512",
      "accuracyLevel 4→0, maxRunning 16→32",
      "prefillChunk 256→128, maxRunning 16→32",
      "prefillChunk 256→512, maxRunning 16→32",
    ]);
  });

  it("is built around whatever the incumbent is, and never returns it", () => {
    const incumbent = { ...DEFAULT_SETTINGS, accuracyLevel: 0, prefillChunk: 64 };
    const list = generateCandidates(incumbent, space, { threadBudget: 2, limit: 3 });
    expect(changes(incumbent, list)).toEqual(["accuracyLevel 0→4", "prefillChunk 64→128", "maxRunning 16→32"]);
    expect(list.some((c) => settingsKey(c) === settingsKey(incumbent))).toBe(false);
  });

  it("counts distance from where a value outside the list would sit", () => {
    const incumbent = { ...DEFAULT_SETTINGS, prefillChunk: 200 };
    expect(changes(incumbent, generateCandidates(incumbent, { prefillChunk: [64, 128, 256, 512] }, { threadBudget: 2 }))).toEqual([
      "prefillChunk 200→128",
      "prefillChunk 200→256",
      "prefillChunk 200→64",
      "prefillChunk 200→512",
    ]);
  });

  it("offers no thread count the budget would not let it measure", () => {
    const threads = { threads: [1, 2, 4] };
    expect(changes(DEFAULT_SETTINGS, generateCandidates(DEFAULT_SETTINGS, threads, { threadBudget: 4 }))).toEqual(["threads 2→1", "threads 2→4"]);
    expect(changes(DEFAULT_SETTINGS, generateCandidates(DEFAULT_SETTINGS, threads, { threadBudget: 2 }))).toEqual(["threads 2→1"]);
    // At one thread the incumbent's 2 is measured as 1 too: nothing to compare.
    expect(generateCandidates(DEFAULT_SETTINGS, threads, { threadBudget: 1 })).toEqual([]);
  });

  it("puts settings already tried at the back, the longest ago first", () => {
    const all = generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2 });
    const tried = new Map([
      [settingsKey(all[0]), "2026-11-20T02:17:00.000Z"],
      [settingsKey(all[1]), "2026-11-19T02:17:00.000Z"],
    ]);
    const next = generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2, tried });
    expect(next.slice(0, 2)).toEqual([all[2], all[3]]);
    expect(next.slice(-2)).toEqual([all[1], all[0]]);
    // One that lost outright goes after every other tried one.
    const losing = generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2, tried, losers: new Set([settingsKey(all[1])]) });
    expect(losing.slice(-2)).toEqual([all[0], all[1]]);
    expect(generateCandidates(DEFAULT_SETTINGS, {}, { threadBudget: 2 })).toEqual([]);
  });

  it("puts a change that lost under an earlier incumbent after every other candidate, before this incumbent's own losers", () => {
    const all = generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2 });
    const losingChanges = new Map([["accuracyLevel", 0.2]].map(([k, v]) => [`${k}=0`, v as number]));
    const list = changes(DEFAULT_SETTINGS, generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2, losingChanges }));
    // Every candidate that sets accuracyLevel 0 (alone or in a pair) moves behind the rest, keeping its order.
    expect(list.slice(-4)).toEqual([
      "accuracyLevel 4→0",
      "accuracyLevel 4→0, prefillChunk 256→128",
      "accuracyLevel 4→0, prefillChunk 256→512",
      "accuracyLevel 4→0, maxRunning 16→32",
    ]);
    expect(list[0]).toBe("prefillChunk 256→128");
    // A candidate that lost outright against this incumbent still comes last of all.
    const losers = new Set([settingsKey(all[1])]);
    expect(generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2, losingChanges, losers }).at(-1)).toEqual(all[1]);
    // A hopeless change (half a metric lost, or the quality budget) goes behind even this incumbent's losers.
    const hopeless = new Map([["accuracyLevel=0", 0.9]]);
    const ranked = changes(DEFAULT_SETTINGS, generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2, losingChanges: hopeless, losers }));
    expect(ranked.indexOf(describeChange(DEFAULT_SETTINGS, all[1]))).toBeLessThan(ranked.indexOf("accuracyLevel 4→0"));
    expect(ranked.at(-1)).toBe("accuracyLevel 4→0, maxRunning 16→32");
    // Changing back to the incumbent's own value is no known loss.
    const incumbent = { ...DEFAULT_SETTINGS, accuracyLevel: 0 };
    expect(changes(incumbent, generateCandidates(incumbent, space, { threadBudget: 2, losingChanges }))[0]).toBe("accuracyLevel 0→4");
  });

  it("builds no pair on a step that lost alone", () => {
    const floatActivations = { ...DEFAULT_SETTINGS, accuracyLevel: 0 };
    const losers = new Set([settingsKey(floatActivations)]);
    const list = changes(DEFAULT_SETTINGS, generateCandidates(DEFAULT_SETTINGS, space, { threadBudget: 2, losers }));
    expect(list.filter((c) => c.includes(","))).toEqual(["prefillChunk 256→128, maxRunning 16→32", "prefillChunk 256→512, maxRunning 16→32"]);
    expect(list).toContain("accuracyLevel 4→0");
    expect(builtOnLoser(DEFAULT_SETTINGS, { ...floatActivations, prefillChunk: 128 }, losers)).toBe(true);
    expect(builtOnLoser(DEFAULT_SETTINGS, floatActivations, losers)).toBe(false);
    expect(builtOnLoser(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, prefillChunk: 128, maxRunning: 32 }, losers)).toBe(false);
  });
});
