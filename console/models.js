// The models page: the catalogue from /v1/models with what this server does with each model; and
// a text model's track page: decode, prefill and 16-sequence throughput and quality per
// measurement, promotions marked, and every candidate, from GET /console/api/tracks/<slug>; in
// local mode, a candidate promoted or the current promotion rolled back from there.
import { api, chart, el, fmt, getJson } from "./lib.js";

export function modelsPage(main) {
  const body = el("tbody");
  const status = el("p", { class: "stats", "aria-live": "polite" }, "Loading the catalogue…");
  main.append(
    el("h1", {}, "Models"),
    status,
    el(
      "div",
      { class: "table-wrap" },
      el(
        "table",
        {},
        el("caption", { class: "stats", style: "text-align:left" }, "The catalogue and what this server does with each model"),
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ...["Model", "Kind", "Capabilities", "Context", "Price (USD)", "State", "Device", "Artifact", "Track"].map((h) => el("th", { scope: "col" }, h)),
          ),
        ),
        body,
      ),
    ),
  );
  getJson("/v1/models")
    .then(({ data }) => {
      const served = data.filter((m) => m.availability === "served").length;
      status.textContent = `${data.length} models, ${served} served`;
      body.replaceChildren(
        ...data.map((m) =>
          el(
            "tr",
            {},
            el("th", { scope: "row" }, el("div", {}, m.id), el("small", { class: "stats" }, m.local_path ?? m.display_name)),
            el("td", {}, m.kind),
            el("td", {}, ...m.capabilities.map((c) => el("span", { class: "badge" }, c))),
            el("td", {}, m.context_length.toLocaleString()),
            el("td", {}, price(m.pricing)),
            el("td", {}, el("span", { class: `badge ${m.availability === "served" ? "served" : ""}` }, (m.availability ?? m.status).replace("_", " "))),
            // Said of served models only: one not loaded runs nowhere yet.
            el("td", {}, m.device ?? "–"),
            el("td", {}, m.artifact_id ? el("code", { title: m.artifact_id }, m.artifact_id.slice(0, 12)) : "–"),
            el("td", {}, m.kind === "text" ? el("a", { href: `#/models/${encodeURIComponent(m.id)}`, "aria-label": `Track of ${m.id}` }, "Track") : "–"),
          ),
        ),
      );
    })
    .catch((err) => status.replaceChildren(el("span", { class: "error-text" }, err.message)));
}

function price(p) {
  if (p.usd_per_audio_minute !== undefined) return `${p.usd_per_audio_minute} / audio min`;
  if (p.input_usd_per_million_tokens !== undefined) return `${p.input_usd_per_million_tokens} in / ${p.output_usd_per_million_tokens} out per 1M`;
  return "–";
}

export function trackPage(main, slug) {
  const status = el("p", { class: "stats", "aria-live": "polite" }, "Loading the track…");
  const serving = el("p");
  const action = el("p", { role: "status" });
  const charts = el("div", { class: "charts" });
  const table = el("div", { class: "table-wrap" });
  main.append(
    el("p", {}, el("a", { href: "#/models" }, "← Models")),
    el("h1", {}, `Track of ${slug}`),
    status,
    serving,
    action,
    charts,
    el("h2", {}, "Candidates"),
    table,
  );
  const plots = [];
  const path = `/console/api/tracks/${encodeURIComponent(slug)}`;

  /** An operator action (local mode, or cloud mode with an admin key): promote an artifact or roll back, then show the track again. */
  async function act(what, body) {
    action.textContent = "…";
    try {
      const response = await api(`${path}/${what}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      action.textContent = (await response.json()).message;
    } catch (err) {
      action.replaceChildren(el("span", { class: "error-text" }, err.message));
    }
    load();
  }

  function load() {
    plots.splice(0).forEach((p) => p.dispose());
    charts.replaceChildren();
    getJson(path)
      .then((track) => {
        const rows = track.candidates.filter((c) => c.verdict !== "failed" && c.verdict !== "running");
        status.textContent = `${track.candidates.length} measurement${track.candidates.length === 1 ? "" : "s"} in ${new Set(track.candidates.map((c) => c.run)).size} run(s)`;
        serving.textContent = track.current
          ? `Serving ${track.current.artifact}, promoted ${track.current.created_at}: ${track.current.reason}`
          : "Serving the default compile (nothing promoted).";
        if (track.operator && track.current) {
          serving.append(
            " ",
            el(
              "button",
              { type: "button", onclick: () => confirm(`Roll back ${track.current.artifact}? The promotion before it serves again.`) && act("rollback", {}) },
              "Roll back",
            ),
          );
        }
        const promotable = (c) =>
          track.operator && c.artifact && c.artifact !== track.current?.artifact && ["incumbent", "promoted", "rejected"].includes(c.verdict);
        if (rows.length === 0) {
          charts.append(el("p", {}, "No measurements yet: run the track with ", el("code", {}, `kiln track run ${slug}`), "."));
        } else {
          const x = rows.map((_, i) => i);
          const labels = rows.map((c) => c.created_at.slice(5, 16).replace("T", " "));
          const xValues = (_u, ticks) => ticks.map((t) => (Number.isInteger(t) ? (labels[t] ?? "") : ""));
          const promoted = (key) => rows.map((c) => (c.verdict === "promoted" ? c.metrics[key] : null));
          const throughput = el("div", { class: "chart", "data-chart": "throughput" });
          const quality = el("div", { class: "chart", "data-chart": "quality" });
          charts.append(throughput, quality);
          plots.push(
            chart(throughput, {
              title: "Throughput (tokens/s) per measurement; rings: promoted",
              xTime: false,
              xValues,
              series: [{ label: "decode" }, { label: "prefill" }, { label: "16 sequences" }, { label: "promoted (decode)", paths: "none" }],
              data: [
                x,
                rows.map((c) => c.metrics.decode_tokens_per_second),
                rows.map((c) => c.metrics.prefill_tokens_per_second),
                rows.map((c) => c.metrics.batch16_tokens_per_second),
                promoted("decode_tokens_per_second"),
              ],
            }),
            chart(quality, {
              title: "Quality against the exact reference",
              xTime: false,
              xValues,
              series: [{ label: "KL divergence" }, { label: "perplexity ratio − 1" }],
              data: [
                x,
                rows.map((c) => c.quality.kl_divergence),
                rows.map((c) => (c.quality.perplexity_ratio === null ? null : c.quality.perplexity_ratio - 1)),
              ],
            }),
          );
        }
        table.replaceChildren(
          el(
            "table",
            {},
            el(
              "thead",
              {},
              el(
                "tr",
                {},
                ...[
                  "When",
                  "Artifact",
                  "Change",
                  "Decode",
                  "Prefill",
                  "16 seq",
                  "TTFT ms",
                  "KL",
                  "PPL ratio",
                  "Verdict",
                  "Why",
                  ...(track.operator ? ["Action"] : []),
                ].map((h) => el("th", { scope: "col" }, h)),
              ),
            ),
            el(
              "tbody",
              {},
              ...track.candidates.map((c) =>
                el(
                  "tr",
                  {},
                  el("td", {}, c.created_at.replace("T", " ").slice(0, 16)),
                  el("td", {}, el("code", { title: c.artifact }, c.artifact.slice(0, 12))),
                  el("td", {}, c.change || "incumbent"),
                  el("td", {}, fmt(c.metrics.decode_tokens_per_second)),
                  el("td", {}, fmt(c.metrics.prefill_tokens_per_second)),
                  el("td", {}, fmt(c.metrics.batch16_tokens_per_second)),
                  el("td", {}, fmt(c.metrics.ttft_ms, 0)),
                  el("td", {}, fmt(c.quality.kl_divergence, 4)),
                  el("td", {}, fmt(c.quality.perplexity_ratio, 3)),
                  el("td", {}, el("span", { class: `badge ${c.verdict === "promoted" ? "served" : ""}` }, c.verdict)),
                  el("td", {}, c.reason),
                  track.operator
                    ? el(
                        "td",
                        {},
                        promotable(c)
                          ? el(
                              "button",
                              {
                                type: "button",
                                "aria-label": `Promote ${c.artifact}`,
                                onclick: () => confirm(`Serve ${c.artifact} for ${slug}?`) && act("promote", { artifact: c.artifact }),
                              },
                              "Promote",
                            )
                          : "",
                      )
                    : null,
                ),
              ),
            ),
          ),
        );
      })
      .catch((err) => status.replaceChildren(el("span", { class: "error-text" }, err.message)));
  }

  load();
  return () => plots.forEach((p) => p.dispose());
}
