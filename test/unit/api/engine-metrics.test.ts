/** The scheduler's statistics on GET /metrics, read from `engine.stats` at scrape time. */
import { describe, expect, it } from "vitest";
import { renderEngineMetrics } from "../../../src/api/metrics/engine-metrics.js";
import { ModelRegistry } from "../../../src/scheduler/index.js";
import { EngineStats, type StepRecord } from "../../../src/scheduler/engine/engine-stats.js";
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

const LINE = /^(# (HELP|TYPE) \w+ .+|\w+(\{[^}]*\})? [-+0-9.eE]+|\w+(\{[^}]*\})? \+Inf)$/;

/** Scripted engine statistics, rendered as a scrape would. */
function scripted() {
  const prefix = { lookups: 3, promptTokens: 200, hitTokens: 50 };
  const stats = new EngineStats(16, () => prefix);
  const render = (...models: string[]) => renderEngineMetrics(models.map((model) => ({ model, stats: stats.snapshot() })));
  return { stats, prefix, render };
}

const scrape = async (app: Awaited<ReturnType<typeof fakeApp>>["app"]) => (await app.inject({ method: "GET", url: "/metrics" })).body;

describe("engine statistics on /metrics", () => {
  it("renders gauges, histograms and counters per model in Prometheus format", () => {
    const { stats, prefix, render } = scripted();
    stats.step(step({ prefillTokens: 100, prefillCalls: 1 }));
    stats.step(step({ decodeRows: 1, decodeCalls: 1 }));
    stats.step(step({ decodeRows: 3, decodeCalls: 1, prefillTokens: 300, prefillCalls: 1 }));
    stats.step(step({ decodeRows: 12, decodeCalls: 2 }));
    stats.queued(0.003);
    stats.queued(0.2);
    stats.compiled(0.3, false);
    stats.compiled(45, true);
    stats.running = 4;
    stats.waiting = 2;
    stats.paused = 1;

    const text = render(SLUG, "other-model");
    const m = `model="${SLUG}"`;
    for (const [name, type] of [
      ["kiln_running_sequences", "gauge"],
      ["kiln_waiting_sequences", "gauge"],
      ["kiln_paused_sequences", "gauge"],
      ["kiln_kv_slots", "gauge"],
      ["kiln_engine_steps_total", "counter"],
      ["kiln_batch_size", "histogram"],
      ["kiln_prefill_tokens_per_step", "histogram"],
      ["kiln_queue_time_seconds", "histogram"],
      ["kiln_prefix_cache_hit_tokens_total", "counter"],
      ["kiln_prefix_cache_lookup_tokens_total", "counter"],
      ["kiln_constraint_compile_seconds", "histogram"],
      ["kiln_constraint_compiles_refused_total", "counter"],
    ]) {
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
      expect(text).toMatch(new RegExp(`# HELP ${name} \\S`));
      // Each family has one HELP and one TYPE line, however many models.
      expect(text.match(new RegExp(`# TYPE ${name} `, "g"))).toHaveLength(1);
    }
    expect(text).toContain(`kiln_running_sequences{${m}} 4\n`);
    expect(text).toContain(`kiln_waiting_sequences{${m}} 2\n`);
    expect(text).toContain(`kiln_paused_sequences{${m}} 1\n`);
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
    expect(text).toContain(`kiln_batch_size_count{model="other-model"} 3\n`);
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
    expect(text).toContain(`kiln_constraint_compile_seconds_bucket{${m},le="0.25"} 0\n`);
    expect(text).toContain(`kiln_constraint_compile_seconds_bucket{${m},le="0.5"} 1\n`);
    expect(text).toContain(`kiln_constraint_compile_seconds_bucket{${m},le="30"} 1\n`);
    expect(text).toContain(`kiln_constraint_compile_seconds_bucket{${m},le="60"} 2\n`);
    expect(text).toContain(`kiln_constraint_compile_seconds_sum{${m}} 45.3\n`);
    expect(text).toContain(`kiln_constraint_compiles_refused_total{${m}} 1\n`);
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(LINE);

    stats.step(step({ decodeRows: 2, decodeCalls: 1 }));
    prefix.hitTokens = 80;
    const again = render(SLUG);
    expect(again).toContain(`kiln_engine_steps_total{${m}} 5\n`);
    expect(again).toContain(`kiln_batch_size_count{${m}} 4\n`);
    expect(again).toContain(`kiln_prefix_cache_hit_tokens_total{${m}} 80\n`);
  });

  it("reads every serving model's engine at scrape time, one label each; models not serving report none", async () => {
    const models = new ModelRegistry();
    models.serve(fakeModel({ slug: "model-a" }).model);
    models.serve(fakeModel({ slug: "model-b" }).model);
    models.expect("still-loading");
    const { app } = await fakeApp({ models });
    const ask = (model: string) =>
      app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model, messages: [{ role: "user", content: "hi" }] }, headers: AUTH });

    await ask("model-b");
    const text = await scrape(app);
    // One prompt step, then decode steps for " world", "!" and the end-of-turn token.
    expect(text).toContain('kiln_prefill_tokens_per_step_count{model="model-b"} 1\n');
    expect(text).toContain('kiln_batch_size_count{model="model-b"} 3\n');
    expect(text).toContain('kiln_batch_size_count{model="model-a"} 0\n');
    expect(text).toContain('kiln_kv_slots{model="model-b"} 4\n');
    expect(text).toContain('kiln_running_sequences{model="model-b"} 0\n');
    expect(text).toContain('kiln_paused_sequences{model="model-b"} 0\n');
    expect(text).not.toContain("still-loading");
    expect(text.match(/# TYPE kiln_kv_slots /g)).toHaveLength(1);
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(LINE);

    await ask("model-a");
    expect(await scrape(app)).toContain('kiln_batch_size_count{model="model-a"} 3\n');
  });

  it("reports no engine series while no model is serving", async () => {
    expect(renderEngineMetrics([])).toBe("");
    const models = new ModelRegistry();
    models.expect(SLUG, "compiling");
    const { app } = await fakeApp({ models });
    const text = await scrape(app);
    expect(text).not.toContain("kiln_batch_size");
    expect(text).not.toContain("kiln_kv_slots");
    expect(text).toContain("# TYPE kiln_time_to_first_token_seconds histogram");
  });
});
