/**
 * Which models this server answers for, and where each one stands: loading (being pulled,
 * compiled, loaded), serving, or failed. The server starts listening while models load.
 */
import type { ServedSpeechModel } from "../speech/types.js";
import type { ServedModel } from "./served-model.js";

/** A model in service of either kind; `kind` tells them apart. */
export type AnyServedModel = ServedModel | ServedSpeechModel;

export type ModelState =
  | { status: "loading"; slug: string; stage: string }
  | { status: "serving"; slug: string; model: AnyServedModel }
  | { status: "failed"; slug: string; error: string };

export class ModelRegistry {
  private readonly states = new Map<string, ModelState>();

  /** Announces a model that will be served once loaded. */
  expect(slug: string, stage = "queued"): void {
    this.states.set(slug, { status: "loading", slug, stage });
  }

  /** Records progress of a loading model (a short phrase, e.g. "compiling"). */
  stage(slug: string, stage: string): void {
    const state = this.states.get(slug);
    if (state?.status === "loading") this.states.set(slug, { ...state, stage });
  }

  serve(model: AnyServedModel): void {
    this.states.set(model.slug, { status: "serving", slug: model.slug, model });
  }

  fail(slug: string, error: string): void {
    this.states.set(slug, { status: "failed", slug, error });
  }

  get(slug: string): ModelState | undefined {
    return this.states.get(slug);
  }

  all(): ModelState[] {
    return [...this.states.values()];
  }

  /** The text models in service (what the engine metrics and queue gauges read). */
  servingText(): ServedModel[] {
    return this.all().flatMap((s) => (s.status === "serving" && s.model.kind === "text" ? [s.model] : []));
  }

  /** True when no model is still loading and at least one serves. */
  get ready(): boolean {
    const all = this.all();
    return all.length > 0 && all.every((s) => s.status !== "loading") && all.some((s) => s.status === "serving");
  }

  /** Closes every serving model (waiting for its running requests). */
  async close(): Promise<void> {
    await Promise.all(this.all().map((s) => (s.status === "serving" ? s.model.close() : undefined)));
  }
}
