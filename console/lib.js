// What every page shares: the element helper, API calls with the session's key, the Prometheus
// text parser and a uPlot wrapper that follows the page's width and colours.
import uPlot from "uplot";

/** Creates an element: `el("button", { type: "button", onclick }, "Send")`. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

/** A labelled control: the label names the input for assistive technology. */
let ids = 0;
export function field(label, control, hint) {
  control.id ||= `f${++ids}`;
  return el("div", { class: "field" }, el("label", { for: control.id }, label), control, hint ? el("small", {}, hint) : null);
}

const KEY = "kiln.apiKey";
/** The key typed into the console (cloud mode), kept for this tab's session only. */
export const apiKey = () => sessionStorage.getItem(KEY) ?? "";

export function authHeaders() {
  const key = apiKey();
  return key ? { authorization: `Bearer ${key}` } : {};
}

/** Shows the key form after a 401 (cloud mode): the console asks for a key once and keeps it in session storage. */
export function askForKey() {
  const form = document.getElementById("key-form");
  form.hidden = false;
  form.onsubmit = (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("api-key").value.trim());
    location.reload();
  };
}

/** fetch() with the session's key; a 401 asks for one; an error answer throws its message. */
export async function api(path, init = {}) {
  const response = await fetch(path, { ...init, headers: { ...authHeaders(), ...(init.headers ?? {}) } });
  if (response.status === 401) askForKey();
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      message = (await response.json()).error?.message ?? message;
    } catch {
      // not JSON: the status says enough
    }
    throw new Error(message);
  }
  return response;
}

export const getJson = async (path) => (await api(path)).json();

/** Prometheus text -> samples `{ name, labels, value }` (comments and blank lines skipped). */
export function parsePrometheus(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

/** The sum of the samples named `name` whose labels include `match`. */
export function total(samples, name, match = {}) {
  let sum = 0;
  for (const s of samples) if (s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  return sum;
}

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
export const PALETTE = ["--c1", "--c2", "--c3", "--c4"];

/**
 * A uPlot chart in `host`, as wide as it is: `series` are `{ label, color?, points? }`, `data` is
 * uPlot's columns (x first). Returns the chart; `setData` updates it in place.
 */
export function chart(host, { title, series, data, xTime = true, xValues, xRange, yValues, height = 200 }) {
  const fg = css("--fg");
  const grid = css("--grid");
  const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
  const plot = new uPlot(
    {
      title,
      width: Math.max(240, host.clientWidth || 480),
      height,
      scales: { x: { time: xTime, ...(xRange ? { range: () => xRange } : {}) } },
      axes: [
        { ...axis, ...(xValues ? { values: xValues } : {}) },
        { ...axis, ...(yValues ? { values: yValues, size: 70 } : {}) },
      ],
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.color ?? css(PALETTE[i % PALETTE.length]),
          width: 2,
          spanGaps: true,
          points: s.points ?? { show: !xTime },
          ...(s.paths === "none" ? { paths: () => null, points: { show: true, size: 12, width: 2, fill: css("--bg") } } : {}),
          ...(s.paths === "bars" ? { paths: uPlot.paths.bars({ size: [0.7, 48] }), fill: css(PALETTE[i % PALETTE.length]), points: { show: false } } : {}),
        })),
      ],
      legend: { live: false },
    },
    data,
    host,
  );
  const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(240, host.clientWidth), height }));
  resize.observe(host);
  plot.dispose = () => {
    resize.disconnect();
    plot.destroy();
  };
  return plot;
}

export const fmt = (value, digits = 1) => (value === null || value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits));
