/**
 * The registry's live switch over fake served models: requests in flight on the old model finish
 * there unaltered, new ones go to the new model, the old one closes once drained, and a load that
 * fails (or a registry closing meanwhile) leaves the old one serving.
 */
import { describe, expect, it, vi } from "vitest";
import { ModelRegistry, type AnyServedModel, type ServedModel } from "../../../../src/scheduler/index.js";
import type { GenerationEvent, GenerationStream } from "../../../../src/scheduler/types.js";
import { fakeModel, word } from "../../api/fake-model.js";

/** A fake model whose answers name `artifactId`, taking `stepMs` per step, with its close counted. */
function model(artifactId: string, stepMs = 5): { model: ServedModel; close: ReturnType<typeof vi.fn> } {
  const { model } = fakeModel({ tokenDelayMs: stepMs, script: Array.from({ length: 12 }, () => word("Hello")) });
  model.artifactId = artifactId;
  const close = vi.fn(model.close);
  model.close = close;
  return { model, close };
}

const request = { promptIds: [72, 105], maxTokens: 10, sampling: {} };

async function collect(stream: GenerationStream): Promise<{ text: string; finish: string | undefined }> {
  let text = "";
  let finish: string | undefined;
  for await (const e of stream as AsyncIterable<GenerationEvent>) {
    if (e.type === "delta") text += e.text;
    else if (e.type === "finish") finish = e.reason;
  }
  return { text, finish };
}

function served(registry: ModelRegistry, slug: string): AnyServedModel {
  const state = registry.get(slug);
  if (state?.status !== "serving") throw new Error(`${slug} is ${state?.status}`);
  return state.model;
}

describe("ModelRegistry.switchModel", () => {
  it("sends new requests to the new model, lets the old one finish its own, then closes it", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 0 });
    const old = model("artifact-old", 10);
    registry.serve(old.model);
    const slug = old.model.slug;

    const inFlight = collect(old.model.engine.submit(request)); // running when the switch happens
    await new Promise((r) => setTimeout(r, 25));
    expect(old.model.engine.load.running).toBe(1);
    const next = model("artifact-new");
    const result = await registry.switchModel(slug, async () => next.model);

    expect(result.model).toBe(next.model);
    expect(result.previous).toBe(old.model);
    expect(served(registry, slug).artifactId).toBe("artifact-new");
    const fresh = (served(registry, slug) as ServedModel).engine.submit(request);
    expect(old.close).not.toHaveBeenCalled(); // not before the grace is over
    await result.retired;
    expect(old.close).toHaveBeenCalledTimes(1);
    // The request that ran on the old model got its whole answer, as if nothing had happened.
    expect(await inFlight).toEqual({ text: "Hello".repeat(10), finish: "length" });
    expect(await collect(fresh)).toEqual({ text: "Hello".repeat(10), finish: "length" });
    expect(next.close).not.toHaveBeenCalled();
    await registry.close();
    expect(next.close).toHaveBeenCalledTimes(1);
  });

  it("closes the old model only after every request it had, queued ones included, is done", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 0 });
    const old = model("artifact-old", 5);
    registry.serve(old.model);
    // 6 requests on 4 slots: 2 wait in the old model's queue when the switch comes.
    const streams = Array.from({ length: 6 }, () => collect(old.model.engine.submit(request)));
    const result = await registry.switchModel(old.model.slug, async () => model("artifact-new").model);
    let retired = false;
    void result.retired.then(() => (retired = true));
    const answers = await Promise.all(streams);
    expect(answers.every((a) => a.finish === "length" && a.text === "Hello".repeat(10))).toBe(true);
    await result.retired;
    expect(retired).toBe(true);
    expect(old.close).toHaveBeenCalledTimes(1);
    await registry.close();
  });

  it("still takes a request that looked the old model up just before the switch, during the grace", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 50 });
    const old = model("artifact-old");
    registry.serve(old.model);
    const lookedUp = served(registry, old.model.slug) as ServedModel;
    const result = await registry.switchModel(old.model.slug, async () => model("artifact-new").model);
    expect(await collect(lookedUp.engine.submit(request))).toEqual({ text: "Hello".repeat(10), finish: "length" });
    await result.retired;
    expect(old.close).toHaveBeenCalledTimes(1);
    await registry.close();
  });

  it("keeps serving the old model when the new one fails to load", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 0 });
    const old = model("artifact-old");
    registry.serve(old.model);
    await expect(registry.switchModel(old.model.slug, async () => Promise.reject(new Error("no such artifact")))).rejects.toThrow("no such artifact");
    expect(served(registry, old.model.slug)).toBe(old.model);
    expect(registry.isSwitching(old.model.slug)).toBe(false);
    expect(await collect(old.model.engine.submit(request))).toEqual({ text: "Hello".repeat(10), finish: "length" });
    expect(old.close).not.toHaveBeenCalled();
    await registry.close();
    expect(old.close).toHaveBeenCalledTimes(1);
  });

  it("refuses a second switch of the same model while one loads, and a model of another slug", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 0 });
    const old = model("artifact-old");
    registry.serve(old.model);
    let release!: (m: ServedModel) => void;
    const first = registry.switchModel(old.model.slug, () => new Promise<ServedModel>((r) => (release = r)));
    expect(registry.isSwitching(old.model.slug)).toBe(true);
    await expect(registry.switchModel(old.model.slug, async () => model("x").model)).rejects.toThrow(/already being switched/);
    const next = model("artifact-new");
    release(next.model);
    await (
      await first
    ).retired;

    const stranger = fakeModel({ slug: "qwen-2-5-0-5b-instruct" }).model;
    const strangerClose = vi.spyOn(stranger, "close");
    await expect(registry.switchModel(old.model.slug, async () => stranger)).rejects.toThrow(/is the text model qwen-2-5-0-5b-instruct/);
    expect(strangerClose).toHaveBeenCalled();
    expect(served(registry, old.model.slug)).toBe(next.model);
    await expect(registry.switchModel("not-served", async () => model("y").model)).rejects.toThrow(/not serving/);
    await registry.close();
  });

  it("aborts a load in progress when the registry closes, and closes what it loaded", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 60_000 });
    const old = model("artifact-old");
    registry.serve(old.model);
    const next = model("artifact-new");
    let aborted = false;
    const switching = registry.switchModel(old.model.slug, (signal) => {
      signal.addEventListener("abort", () => (aborted = true));
      return new Promise<ServedModel>((r) => setTimeout(() => r(next.model), 20));
    });
    const closed = registry.close();
    await expect(switching).rejects.toThrow(/stopping/);
    await closed;
    expect(aborted).toBe(true);
    expect(next.close).toHaveBeenCalledTimes(1);
    expect(old.close).toHaveBeenCalledTimes(1);
    expect(served(registry, old.model.slug)).toBe(old.model);
  });

  it("closing the registry does not wait out a retiring model's grace", async () => {
    const registry = new ModelRegistry({ retireGraceMs: 60_000 });
    const old = model("artifact-old");
    registry.serve(old.model);
    const result = await registry.switchModel(old.model.slug, async () => model("artifact-new").model);
    const started = Date.now();
    await registry.close();
    await result.retired;
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(old.close).toHaveBeenCalledTimes(1);
  });
});
