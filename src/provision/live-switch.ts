/**
 * The live switch: a running server follows the promotions of the text models it serves. Every
 * `intervalMs` it reads each model's current promotion (one indexed row per model; the database is
 * in WAL mode, so the process that promotes writes meanwhile without waiting for it). When that is
 * no longer the promotion the served artifact was loaded for (a promotion, or a rollback), the new
 * artifact loads beside the old one and the registry switches to it: new requests go to the new
 * one, the old one finishes its requests and closes (`ModelRegistry.switchModel`). A load that fails
 * leaves the old one serving; it is tried again only when the promotion changes again.
 */
import type { KilnDatabase } from "../catalogue/db.js";
import { currentPromotion, type Promotion } from "../catalogue/promotions.js";
import type { ModelRegistry, ServedModel } from "../scheduler/index.js";

export const DEFAULT_PROMOTION_POLL_MS = 2000;

/** Where the watcher reports (a pino logger fits). */
export interface SwitchLog {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export interface PromotionWatcherOptions {
  db: KilnDatabase;
  registry: ModelRegistry;
  /**
   * Loads `slug` as `promotion` says (null: the default compile) to replace `current`. It must throw
   * rather than load anything else (`loadModel` with `fallback: false`), or the switch would serve
   * an artifact nobody promoted.
   */
  load(slug: string, promotion: Promotion | null, signal: AbortSignal, current: ServedModel): Promise<ServedModel>;
  /** Milliseconds between reads of the promotions. Default {@link DEFAULT_PROMOTION_POLL_MS}. */
  intervalMs?: number;
  /** The device the server's models run on: its promotions are the ones followed. Default "cpu". */
  device?: string;
  log?: SwitchLog;
}

const SILENT: SwitchLog = { info() {}, warn() {}, error() {} };

/** What a promotion serves, in words. */
function describe(promotion: Promotion | null): string {
  return promotion
    ? `artifact ${promotion.artifactId} (promoted ${promotion.createdAt}${promotion.reason ? `: ${promotion.reason}` : ""})`
    : "the default compile";
}

/** Whether serving `next` means serving what `served` already does: the same artifact with the same settings. */
function sameService(served: Promotion | null, next: Promotion | null): boolean {
  if (served === null || next === null) return served === next;
  return served.artifactId === next.artifactId && JSON.stringify(served.settings) === JSON.stringify(next.settings);
}

export class PromotionWatcher {
  /** Per watched model, the promotion (its row id; null: none) it was last loaded or switched for. */
  private readonly handled = new Map<string, string | null>();
  private timer: NodeJS.Timeout | null = null;
  private unreadable = false;
  private readonly log: SwitchLog;

  constructor(private readonly options: PromotionWatcherOptions) {
    this.log = options.log ?? SILENT;
  }

  /**
   * The current promotion of `slug`, to load the model with at start; `slug` is watched from then
   * on, so a promotion made while it loads is switched to at the first poll.
   */
  claim(slug: string): Promotion | null {
    const promotion = currentPromotion(this.options.db, slug, this.options.device);
    this.handled.set(slug, promotion?.id ?? null);
    return promotion;
  }

  /** Polls every `intervalMs` until {@link stop}. The timer does not keep the process alive. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.poll(), this.options.intervalMs ?? DEFAULT_PROMOTION_POLL_MS);
    this.timer.unref();
  }

  /** Stops polling. A switch in progress goes on; closing the registry aborts its load. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * One round: reads each watched model's promotion and starts a switch where it changed. Resolves
   * once the switches it started have switched or failed (not once the old models have drained).
   */
  async poll(): Promise<void> {
    const switches: Array<Promise<void>> = [];
    for (const [slug, handled] of this.handled) {
      const state = this.options.registry.get(slug);
      // A model being switched is looked at again once its switch is over.
      if (state?.status !== "serving" || state.model.kind !== "text" || this.options.registry.isSwitching(slug)) continue;
      const promotion = this.read(slug);
      if (promotion === undefined || (promotion?.id ?? null) === handled) continue;
      this.handled.set(slug, promotion?.id ?? null);
      const served = state.model;
      if (sameService(served.promotion ?? null, promotion)) {
        // A new row for what already serves (promoted again): nothing to load, only what /v1/models tells.
        served.promotion = promotion;
        continue;
      }
      switches.push(this.switchTo(slug, promotion, served));
    }
    await Promise.all(switches);
  }

  /** The current promotion, or undefined when the database cannot be read now (reported once until it can). */
  private read(slug: string): Promotion | null | undefined {
    try {
      const promotion = currentPromotion(this.options.db, slug, this.options.device);
      this.unreadable = false;
      return promotion;
    } catch (err) {
      if (!this.unreadable) this.log.warn({ err }, `cannot read the promotions (${(err as Error).message}): no live switch until they can be read`);
      this.unreadable = true;
      return undefined;
    }
  }

  private async switchTo(slug: string, promotion: Promotion | null, served: ServedModel): Promise<void> {
    const fields = { model: slug, from: served.artifactId, to: promotion?.artifactId ?? "default compile", promotion: promotion?.id ?? null };
    this.log.info(fields, `${slug}: now promoted: ${describe(promotion)}; loading it beside ${served.artifactId}`);
    const started = performance.now();
    try {
      const done = await this.options.registry.switchModel(slug, (signal) => this.options.load(slug, promotion, signal, served));
      const seconds = Math.round((performance.now() - started) / 100) / 10;
      this.log.info(
        { ...fields, to: done.model.artifactId, seconds },
        `${slug}: switched to ${done.model.artifactId} after ${seconds} s; ${served.artifactId} finishes its requests, then closes`,
      );
      done.retired.then(
        () => this.log.info(fields, `${slug}: ${served.artifactId} drained and closed`),
        (err: unknown) => this.log.error({ ...fields, err }, `${slug}: closing ${served.artifactId} after the switch failed: ${(err as Error).message}`),
      );
    } catch (err) {
      this.log.error({ ...fields, err }, `${slug}: cannot switch to ${describe(promotion)}: ${(err as Error).message}; ${served.artifactId} keeps serving`);
    }
  }
}
