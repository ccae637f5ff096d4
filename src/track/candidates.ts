/**
 * Candidates around the incumbent: a local search, not the grid. Each candidate changes one
 * setting to a neighbouring value of the job's search space (nearest values first, the settings
 * taken in turn), then pairs of such single steps; a night measures the first few, and settings
 * already tried against this incumbent go to the back of the line, so the next night goes further.
 */
import type { SearchSpace } from "./job.js";
import { measuredThreads, SETTING_NAMES, settingsKey, type SettingName, type TrackSettings } from "./settings.js";

export interface CandidateOptions {
  /** Threads a measurement may use: a `threads` value the budget would clamp to the incumbent's measured threads measures nothing new. */
  threadBudget: number;
  /** When each settings key was last tried against this incumbent (ISO time); untried ones come first, then the longest ago. */
  tried?: ReadonlyMap<string, string>;
  /** Settings keys of candidates that lost outright against this incumbent (slower, over the quality budget, or failed): no pair is built on them, and they are retried last. */
  losers?: ReadonlySet<string>;
  /**
   * One-setting changes ("name=value") that lost outright against an earlier incumbent, with how
   * badly (records' `lossSize`): candidates making one of them come after every other candidate,
   * before this incumbent's own losers; those that lost by {@link HOPELESS_LOSS} or more come last of all.
   */
  losingChanges?: ReadonlyMap<string, number>;
  /** Most candidates returned. Default: all. */
  limit?: number;
}

/** A change that once lost this much (half a metric, or the quality budget) is measured after every other, this incumbent's losers included. */
export const HOPELESS_LOSS = 0.5;

interface Step {
  name: SettingName;
  value: TrackSettings[SettingName];
  /** How far along the job's list of values from the incumbent's (1 = adjacent). */
  distance: number;
}

/** The single changes the search space offers from `incumbent`, nearest first and the settings taken in turn. */
function steps(incumbent: TrackSettings, space: SearchSpace, threadBudget: number): Step[] {
  const byDistance: Step[][] = [];
  for (const name of SETTING_NAMES) {
    const values = space[name] as ReadonlyArray<TrackSettings[SettingName]> | undefined;
    if (!values || values.length === 0) continue;
    const current = incumbent[name];
    // Sorted so that "adjacent" means the next larger or smaller value, whatever order the job lists them in.
    const ordered = typeof current === "number" ? [...values].sort((a, b) => (a as number) - (b as number)) : [...values];
    let at = ordered.indexOf(current);
    if (at === -1 && typeof current === "number") {
      // The incumbent's value is not in the list: distances count from where it would sit.
      at = ordered.filter((v) => (v as number) < current).length - 0.5;
    }
    ordered.forEach((value, i) => {
      if (value === current) return;
      if (name === "threads" && (value as number) > threadBudget) return;
      if (name === "threads" && measuredThreads({ ...incumbent, threads: value as number }, threadBudget) === measuredThreads(incumbent, threadBudget)) return;
      const distance = at === -1 ? i + 1 : Math.ceil(Math.abs(i - at));
      (byDistance[distance] ??= []).push({ name, value, distance });
    });
  }
  return byDistance.flatMap((level) => level ?? []);
}

function apply(settings: TrackSettings, changes: readonly Step[]): TrackSettings {
  const next = { ...settings } as Record<SettingName, unknown>;
  for (const step of changes) next[step.name] = step.value;
  return next as unknown as TrackSettings;
}

/**
 * The candidates of one round around `incumbent`: every single change (nearest first), then every
 * pair of adjacent single changes to two different settings (neither of which lost alone); never the incumbent itself, never the
 * same settings twice. Untried settings keep this order; tried ones follow, longest ago first, and
 * those that lost outright last.
 */
export function generateCandidates(incumbent: TrackSettings, space: SearchSpace, options: CandidateOptions): TrackSettings[] {
  const singles = steps(incumbent, space, options.threadBudget);
  const losers = options.losers ?? new Set<string>();
  // A step that lost alone is not worth trying in company.
  const adjacent = singles.filter((s) => s.distance === 1 && !losers.has(settingsKey(apply(incumbent, [s]))));
  const pairs: Step[][] = [];
  for (let i = 0; i < adjacent.length; i++) {
    for (let j = i + 1; j < adjacent.length; j++) if (adjacent[i].name !== adjacent[j].name) pairs.push([adjacent[i], adjacent[j]]);
  }
  const seen = new Set([settingsKey(incumbent)]);
  const all: TrackSettings[] = [];
  for (const changes of [...singles.map((s) => [s]), ...pairs]) {
    const candidate = apply(incumbent, changes);
    const key = settingsKey(candidate);
    if (seen.has(key)) continue;
    seen.add(key);
    all.push(candidate);
  }
  const tried = options.tried ?? new Map<string, string>();
  const known = options.losingChanges ?? new Map<string, number>();
  /** The worst loss a change of `c` had under an earlier incumbent; -1 when none of them lost. */
  const knownLoss = (c: TrackSettings) =>
    Math.max(-1, ...SETTING_NAMES.filter((name) => c[name] !== incumbent[name]).map((name) => known.get(`${name}=${c[name]}`) ?? -1));
  // Untried first (in generation order), then tried ones longest ago first; a change that lost
  // before, under another incumbent, after those; then this incumbent's own outright losers; hopeless changes last.
  const order = (c: TrackSettings) => {
    const key = settingsKey(c);
    const loss = knownLoss(c);
    const klass = loss >= HOPELESS_LOSS ? 3 : losers.has(key) ? 2 : loss >= 0 ? 1 : 0;
    return `${klass}${tried.has(key) ? `1${tried.get(key)}` : "0"}`;
  };
  const ranked = all.map((c, i) => ({ c, i, rank: order(c) }));
  ranked.sort((a, b) => a.rank.localeCompare(b.rank) || a.i - b.i);
  return ranked.map((r) => r.c).slice(0, options.limit ?? Infinity);
}

/** Whether `candidate` changes, among others, a setting whose change alone lost against `incumbent`. */
export function builtOnLoser(incumbent: TrackSettings, candidate: TrackSettings, losers: ReadonlySet<string>): boolean {
  const changed = SETTING_NAMES.filter((name) => incumbent[name] !== candidate[name]);
  if (changed.length < 2) return false;
  return changed.some((name) => losers.has(settingsKey({ ...incumbent, [name]: candidate[name] } as TrackSettings)));
}
