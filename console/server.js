// The server page: /metrics read every second, per served text model the running and waiting
// sequences, decoded tokens/s, mean TTFT, queue time and batch size over the last interval, as
// tiles and as charts of the last five minutes that update in place; and the TTFT and queue-time
// histograms since the server started.
import { api, chart, el, fmt, parsePrometheus, total } from "./lib.js";

const EVERY_MS = 1000;
const KEEP = 300;

export function serverPage(main) {
  const status = el("p", { class: "stats", "aria-live": "polite" });
  const tiles = el("div", { class: "tiles" });
  const charts = el("div", { class: "charts" });
  const model = el("select", {}, el("option", { value: "" }, "All models"));
  main.append(
    el("h1", {}, "Server"),
    el(
      "div",
      { class: "row", style: "max-width:320px" },
      el("div", { class: "field" }, el("label", { for: "server-model" }, "Model"), Object.assign(model, { id: "server-model" })),
    ),
    status,
    tiles,
    charts,
  );

  const series = { t: [], running: [], waiting: [], tps: [], ttft: [], queue: [], batch: [] };
  const plots = [];
  const hosts = Array.from({ length: 5 }, () => el("div", { class: "chart" }));
  charts.append(...hosts);
  let previous = null;
  let timer;
  let stopped = false;

  const match = () => (model.value ? { model: model.value } : {});
  /** Mean of a histogram over the interval: Δsum / Δcount (null without observations). */
  const meanOver = (now, before, name) => {
    const count = total(now, `${name}_count`, match()) - total(before, `${name}_count`, match());
    return count > 0 ? (total(now, `${name}_sum`, match()) - total(before, `${name}_sum`, match())) / count : null;
  };

  model.addEventListener("change", () => {
    for (const key of Object.keys(series)) series[key].length = 0;
  });

  async function poll() {
    try {
      const text = await (await api("/metrics")).text();
      const samples = parsePrometheus(text);
      const at = Date.now() / 1000;
      const models = [...new Set(samples.filter((s) => s.name === "kiln_running_sequences").map((s) => s.labels.model))];
      for (const m of models) if (![...model.options].some((o) => o.value === m)) model.append(el("option", { value: m }, m));
      if (previous) {
        const dt = at - previous.at;
        // Each decode step adds its batch size to the histogram's sum: the tokens decoded, counted as
        // they are made (completion token counters move only when a request finishes).
        const tokens = (total(samples, "kiln_batch_size_sum", match()) - total(previous.samples, "kiln_batch_size_sum", match())) / dt;
        const point = {
          running: total(samples, "kiln_running_sequences", match()),
          waiting: total(samples, "kiln_waiting_sequences", match()),
          tps: tokens,
          ttft: ms(meanOver(samples, previous.samples, "kiln_time_to_first_token_seconds")),
          queue: ms(meanOver(samples, previous.samples, "kiln_queue_time_seconds")),
          batch: meanOver(samples, previous.samples, "kiln_batch_size"),
        };
        series.t.push(at);
        for (const key of Object.keys(point)) series[key].push(point[key]);
        if (series.t.length > KEEP) for (const key of Object.keys(series)) series[key].shift();
        showTiles(samples, point);
        draw(samples);
      }
      previous = { at, samples };
      status.textContent = `Updated ${new Date().toLocaleTimeString()} · ${models.length} text model${models.length === 1 ? "" : "s"} served`;
    } catch (err) {
      status.replaceChildren(el("span", { class: "error-text" }, `Metrics: ${err.message}`));
    }
    if (!stopped) timer = setTimeout(poll, EVERY_MS);
  }

  function showTiles(samples, point) {
    const tile = (label, value, id) =>
      el("div", { class: "tile" }, el("div", { class: "label", id }, label), el("div", { class: "value", "aria-labelledby": id, "data-metric": id }, value));
    tiles.replaceChildren(
      tile("Running sequences", String(point.running), "running"),
      tile("Waiting sequences", String(point.waiting), "waiting"),
      tile("Decoded tokens/s", fmt(point.tps), "tokens-per-second"),
      tile("Mean TTFT (ms, last 1 s)", fmt(point.ttft, 0), "ttft"),
      tile("Mean queue time (ms, last 1 s)", fmt(point.queue, 0), "queue"),
      tile("Mean batch size (last 1 s)", fmt(point.batch), "batch"),
      tile("Completion tokens", String(total(samples, "kiln_completion_tokens_total", match())), "completion-tokens"),
      tile("Cancelled requests", String(total(samples, "kiln_requests_cancelled_total", match())), "cancelled"),
    );
  }

  function draw(samples) {
    const ttft = histogram(samples, "kiln_time_to_first_token_seconds", match());
    const queue = histogram(samples, "kiln_queue_time_seconds", match());
    const columns = [
      [series.t, series.running, series.waiting],
      [series.t, series.tps, series.batch],
      [series.t, series.ttft, series.queue],
      [ttft.x, ttft.counts],
      [queue.x, queue.counts],
    ];
    if (plots.length === 0) {
      const bars = (host, title, h) =>
        chart(host, {
          title,
          xTime: false,
          xValues: (_u, ticks) => ticks.map((t) => h.labels[t] ?? ""),
          series: [{ label: "requests", paths: "bars" }],
          data: [h.x, h.counts],
        });
      plots.push(
        chart(hosts[0], { title: "Sequences", series: [{ label: "running" }, { label: "waiting" }], data: columns[0] }),
        chart(hosts[1], { title: "Throughput", series: [{ label: "decoded tokens/s" }, { label: "batch size" }], data: columns[1] }),
        chart(hosts[2], { title: "Latency (ms, mean per second)", series: [{ label: "TTFT" }, { label: "queue time" }], data: columns[2] }),
        bars(hosts[3], "TTFT since the server started (requests per bucket, seconds)", ttft),
        bars(hosts[4], "Queue time since the server started (requests per bucket, seconds)", queue),
      );
    } else plots.forEach((p, i) => p.setData(columns[i]));
  }

  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
    for (const p of plots) p.dispose();
  };
}

const ms = (seconds) => (seconds === null ? null : seconds * 1000);

/** A Prometheus histogram's buckets as counts per bucket (not cumulative), labelled by their upper bounds: "≤0.05", …, ">10". */
function histogram(samples, name, match) {
  const bounds = [...new Set(samples.filter((s) => s.name === `${name}_bucket`).map((s) => s.labels.le))];
  bounds.sort((a, b) => Number(a) - Number(b));
  const cumulative = bounds.map((le) => total(samples, `${name}_bucket`, { ...match, le }));
  const counts = cumulative.map((c, i) => c - (i > 0 ? cumulative[i - 1] : 0));
  const labels = bounds.map((le, i) => (le === "+Inf" ? `>${bounds[i - 1] ?? 0}` : `≤${le}`));
  return { x: counts.map((_, i) => i), counts, labels };
}
