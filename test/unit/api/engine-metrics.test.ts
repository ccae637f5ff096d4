/** The scheduler's statistics on GET /metrics, read from `engine.stats` at scrape time. */
import { describe, expect, it } from "vitest";
import { engineSnapshots, renderEngineMetrics } from "../../../src/api/metrics/engine-metrics.js";
import { EngineStats, type StepRecord } from "../../../src/scheduler/engine-stats.js";
import { ModelRegistry } from "../../../src/scheduler/model-registry.js";
import type { Engine } from "../../../src/scheduler/types.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

const step = (r: Partial<StepRecord>): StepRecord => ({
  decodeRows: 0,
  decodeCalls: 0,
  prefillTokens: 0,
  prefillCalls: 0,
  copies: 0,
  seconds: 0.01,
  running: 0,
  waiting: 0,
  ...r,
});

/** A fake model whose engine also keeps (scripted) batch-engine statistics. */
function modelWithStats(slug = SLUG) {
  const fake = fakeModel({ slug });
  const prefix = { lookups: 3, promptTokens: 200, hitTokens: 50 };
  const stats = new EngineStats(16, () => prefix);
  const inner = fake.model.engine;
  const engine: Engine = {
    submit: (request, signal) => inner.submit(request, signal),
    get load() {
      return inner.load;
    },
    stats,
    close: () => inner.close(),
  };
  return { model: { ...fake.model, engine }, stats, prefix };
}

const LINE = /^(# (HELP|TYPE) \w+ .+|\w+(\{[^}]*\})? [-+0-9.eE]+|\w+(\{[^}]*\})? \+Inf)$/;

describe("engine statistics on /metrics", () => {
  it("exposes gauges, histograms and counters per model in Prometheus format", async () => {
    const { model, stats, prefix } = modelWithStats();
    const models = new ModelRegistry();
    models.serve(model);
    const { app } = await fakeApp({ models });

    stats.step(step({ prefillTokens: 100, prefillCalls: 1 }));
    stats.step(step({ decodeRows: 1, decodeCalls: 1 }));
    stats.step(step({ decodeRows: 3, decodeCalls: 1, prefillTokens: 300, prefillCalls: 1 }));
    stats.step(step({ decodeRows: 12, decodeCalls: 2 }));
    stats.queued(0.003);
    stats.queued(0.2);
    stats.running = 4;
    stats.waiting = 2;

    const res = await app.inject({ method: "GET", url: "/metrics" });
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = res.body;
    const m = `model="${SLUG}"`;
    for (const [name, type] of [
      ["kiln_running_sequences", "gauge"],
      ["kiln_waiting_sequences", "gauge"],
      ["kiln_kv_slots", "gauge"],
      ["kiln_engine_steps_total", "counter"],
      ["kiln_batch_size", "histogram"],
      ["kiln_prefill_tokens_per_step", "histogram"],
      ["kiln_queue_time_seconds", "histogram"],
      ["kiln_prefix_cache_hit_tokens_total", "counter"],
      ["kiln_prefix_cache_lookup_tokens_total", "counter"],
    ]) {
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
      expect(text).toMatch(new RegExp(`# HELP ${name} \\S`));
    }
    expect(text).toContain(`kiln_running_sequences{${m}} 4\n`);
    expect(text).toContain(`kiln_waiting_sequences{${m}} 2\n`);
    expect(text).toContain(`kiln_kv_slots{${m}} 16\n`);
    expect(text).toContain(`kiln_engine_steps_total{${m}} 4\n`);
    // Batch size: 1, 3 and 12 rows (the prefill-only step is not a decode step); cumulative buckets.
    expect(text).toContain(
      [
        `kiln_batch_size_bucket{${m},le="1"} 1`,
        `kiln_batch_size_bucket{${m},le="2"} 1`,
        `kiln_batch_size_bucket{${m},le="4"} 2`,
        `kiln_batch_size_bucket{${m},le="8"} 2`,
        `kiln_batch_size_bucket{${m},le="16"} 3`,
        `kiln_batch_size_bucket{${m},le="32"} 3`,
        `kiln_batch_size_bucket{${m},le="64"} 3`,
        `kiln_batch_size_bucket{${m},le="128"} 3`,
        `kiln_batch_size_bucket{${m},le="+Inf"} 3`,
        `kiln_batch_size_sum{${m}} 16`,
        `kiln_batch_size_count{${m}} 3`,
      ].join("\n") + "\n",
    );
    expect(text).toContain(`kiln_prefill_tokens_per_step_bucket{${m},le="128"} 1\n`);
    expect(text).toContain(`kiln_prefill_tokens_per_step_bucket{${m},le="256"} 1\n`);
    expect(text).toContain(`kiln_prefill_tokens_per_step_bucket{${m},le="512"} 2\n`);
    expect(text).toContain(`kiln_prefill_tokens_per_step_sum{${m}} 400\n`);
    expect(text).toContain(`kiln_prefill_tokens_per_step_count{${m}} 2\n`);
    expect(text).toContain(`kiln_queue_time_seconds_bucket{${m},le="0.001"} 0\n`);
    expect(text).toContain(`kiln_queue_time_seconds_bucket{${m},le="0.005"} 1\n`);
    expect(text).toContain(`kiln_queue_time_seconds_bucket{${m},le="0.25"} 2\n`);
    expect(text).toContain(`kiln_queue_time_seconds_bucket{${m},le="+Inf"} 2\n`);
    expect(text).toContain(`kiln_queue_time_seconds_count{${m}} 2\n`);
    expect(text).toContain(`kiln_prefix_cache_hit_tokens_total{${m}} 50\n`);
    expect(text).toContain(`kiln_prefix_cache_lookup_tokens_total{${m}} 200\n`);
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(LINE);
    // Each family has one HELP and one TYPE line, even with several models.
    expect(text.match(/# TYPE kiln_batch_size /g)).toHaveLength(1);

    // Read at scrape time: later steps show up in the next scrape.
    stats.step(step({ decodeRows: 2, decodeCalls: 1 }));
    stats.running = 0;
    stats.waiting = 0;
    prefix.hitTokens = 80;
    const again = (await app.inject({ method: "GET", url: "/metrics" })).body;
    expect(again).toContain(`kiln_engine_steps_total{${m}} 5\n`);
    expect(again).toContain(`kiln_batch_size_count{${m}} 4\n`);
    expect(again).toContain(`kiln_running_sequences{${m}} 0\n`);
    expect(again).toContain(`kiln_waiting_sequences{${m}} 0\n`);
    expect(again).toContain(`kiln_prefix_cache_hit_tokens_total{${m}} 80\n`);
  });

  it("labels each model and leaves out models without stats", async () => {
    const a = modelWithStats("model-a");
    const b = modelWithStats("model-b");
    const plain = fakeModel({ slug: "plain-model" });
    const models = new ModelRegistry();
    models.serve(a.model);
    models.serve(b.model);
    models.serve(plain.model);
    models.expect("still-loading");
    a.stats.step(step({ decodeRows: 5, decodeCalls: 1 }));
    const { app } = await fakeApp({ models });
    await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: "model-b", messages: [{ role: "user", content: "hi" }] }, headers: AUTH });
    const text = (await app.inject({ method: "GET", url: "/metrics" })).body;
    expect(text).toContain('kiln_batch_size_count{model="model-a"} 1\n');
    expect(text).toContain('kiln_batch_size_count{model="model-b"} 0\n');
    expect(text).toContain('kiln_kv_slots{model="model-b"} 16\n');
    expect(text).not.toMatch(/kiln_(kv_slots|batch_size_count|running_sequences)\{model="plain-model"/);
    expect(text).not.toContain("still-loading");
    expect(text.match(/# TYPE kiln_kv_slots /g)).toHaveLength(1);
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(LINE);
  });

  it("reports nothing for engines without stats", async () => {
    const models = new ModelRegistry();
    models.serve(fakeModel().model);
    expect(engineSnapshots(models)).toEqual([]);
    expect(renderEngineMetrics([])).toBe("");
    const { app } = await fakeApp({ models });
    const text = (await app.inject({ method: "GET", url: "/metrics" })).body;
    expect(text).not.toContain("kiln_batch_size");
    expect(text).not.toContain("kiln_kv_slots");
    expect(text).toContain("# TYPE kiln_time_to_first_token_seconds histogram");
  });
});
