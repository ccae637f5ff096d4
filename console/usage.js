// The usage page (cloud mode): the console's key's own requests, tokens and spend over the last 30
// days, per UTC day and model, from GET /console/api/usage (the ledger `kiln usage` totals).
import { chart, el, fmt, getJson } from "./lib.js";

export function usagePage(main) {
  const status = el("p", { class: "stats", "aria-live": "polite" }, "Loading usage…");
  const charts = el("div", { class: "charts" });
  const table = el("div", { class: "table-wrap" });
  main.append(el("h1", {}, "Usage"), status, charts, el("h2", {}, "By model"), table);
  const plots = [];

  getJson("/console/api/usage")
    .then(({ key, since, days }) => {
      status.textContent = `Key ${key}, since ${since} (UTC days)`;
      if (days.length === 0) {
        charts.append(el("p", {}, "No requests with this key in that time."));
        return;
      }
      const dates = [...new Set(days.map((d) => d.day))].sort();
      const models = [...new Set(days.map((d) => d.model))].sort();
      const x = dates.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
      const column = (model, value) => dates.map((day) => days.filter((d) => d.day === day && d.model === model).reduce((sum, d) => sum + value(d), 0));
      const usd = (d) => Number(d.costNanoUsd) / 1e9;
      const tokens = (d) => d.promptTokens + d.completionTokens;
      const cost = el("div", { class: "chart", "data-chart": "cost" });
      const used = el("div", { class: "chart", "data-chart": "tokens" });
      charts.append(cost, used);
      const series = models.map((m) => ({ label: m, points: { show: true } }));
      // The whole window, so that a few days of use are placed in it rather than stretched across the chart.
      const xRange = [Date.parse(`${since}T00:00:00Z`) / 1000, Date.now() / 1000 + 86_400];
      const yValues = (_u, ticks) => ticks.map((t) => (t === 0 ? "0" : t.toPrecision(2)));
      plots.push(
        chart(cost, { title: "Spend per day (USD)", series, xRange, yValues, data: [x, ...models.map((m) => column(m, usd))] }),
        chart(used, { title: "Tokens per day (prompt + completion)", series, xRange, data: [x, ...models.map((m) => column(m, tokens))] }),
      );
      const sum = (m, value) => days.filter((d) => d.model === m).reduce((s, d) => s + value(d), 0);
      table.replaceChildren(
        el(
          "table",
          {},
          el(
            "thead",
            {},
            el("tr", {}, ...["Model", "Requests", "Prompt tokens", "Completion tokens", "Audio s", "USD"].map((h) => el("th", { scope: "col" }, h))),
          ),
          el(
            "tbody",
            {},
            ...models.map((m) =>
              el(
                "tr",
                {},
                el("th", { scope: "row" }, m),
                el("td", {}, String(sum(m, (d) => d.requests))),
                el("td", {}, String(sum(m, (d) => d.promptTokens))),
                el("td", {}, String(sum(m, (d) => d.completionTokens))),
                el("td", {}, fmt(sum(m, (d) => d.audioMs) / 1000)),
                el("td", {}, fmt(sum(m, usd), 9)),
              ),
            ),
          ),
        ),
      );
    })
    .catch((err) => status.replaceChildren(el("span", { class: "error-text" }, err.message)));

  return () => plots.forEach((p) => p.dispose());
}
