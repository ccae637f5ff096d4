/// <reference lib="dom" />
/**
 * The web console in a real browser: Debian's chromium driven by puppeteer-core against a real
 * `kiln serve` with the embedded text and speech models. Each page is used as a person would (the
 * chat streams and Stop cancels on the server, an upload is transcribed, a track page plots real
 * track rows, the server page moves under load), nothing is logged as an error, and Tab alone
 * reaches every control. Screenshots go to $KILN_HOME/screenshots/ (not committed).
 */
import { existsSync, mkdirSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { finishCandidate, startCandidate } from "../../../src/track/records.js";
import { DEFAULT_SETTINGS } from "../../../src/track/settings.js";
import { startServer, stopServer, type RunningServer } from "../../support/server.js";
import { speechFixture } from "../../support/speech.js";

const TEXT = "smollm2-135m-instruct";
const SPEECH = "whisper-tiny-en";
/** The track page's model: not served, so its rows disturb no other test; they are removed afterwards. */
const TRACKED = "smollm2-360m-instruct";
const RUN_PREFIX = "console-test-";
const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p)) ?? "chromium";
const SHOTS = join(process.env.KILN_HOME!, "screenshots");

let server: RunningServer | undefined;
let browser: Browser | undefined;
let page: Page;
const errors: string[] = [];

/** Three runs of track rows as a track run writes them: an incumbent and a candidate each, the second run promoting. */
function seedTrack(): void {
  const db = openDatabase();
  try {
    const rows = [
      { run: 1, change: "", verdict: "incumbent", decode: 100, prefill: 900, b16: 400, kl: 0.0 },
      { run: 1, change: "prefillChunk 128", verdict: "rejected", decode: 101, prefill: 940, b16: 405, kl: 0.001 },
      { run: 2, change: "", verdict: "incumbent", decode: 99, prefill: 905, b16: 398, kl: 0.0 },
      { run: 2, change: "numerics fast", verdict: "promoted", decode: 121, prefill: 1010, b16: 470, kl: 0.004 },
      { run: 3, change: "", verdict: "incumbent", decode: 120, prefill: 1000, b16: 468, kl: 0.004 },
    ] as const;
    for (const r of rows) {
      const id = startCandidate(db, {
        runId: `${RUN_PREFIX}${r.run}`,
        slug: TRACKED,
        settings: { ...DEFAULT_SETTINGS },
        change: r.change,
        machine: { pid: process.pid },
        artifactId: `art${r.run}${r.verdict}`,
      });
      finishCandidate(db, id, {
        verdict: r.verdict,
        reason: r.verdict === "promoted" ? "21% faster decode" : "",
        metrics: { decode_tokens_per_second: r.decode, prefill_tokens_per_second: r.prefill, batch16_tokens_per_second: r.b16, ttft_ms: 50 },
        quality: { kl_divergence: r.kl, perplexity_ratio: 1 + r.kl },
      });
    }
  } finally {
    db.close();
  }
}

/** The promoted row's artifact, as far as `kiln promote` looks: its folder and manifest. */
const ARTIFACT = "art2promoted";
const artifactDir = () => join(process.env.KILN_HOME!, "artifacts", TRACKED, ARTIFACT);

function removeTrack(): void {
  const db = openDatabase();
  try {
    db.prepare(`DELETE FROM track_candidates WHERE run_id LIKE ?`).run(`${RUN_PREFIX}%`);
    db.prepare(`DELETE FROM artifacts_promoted WHERE slug = ? AND artifact_id = ?`).run(TRACKED, ARTIFACT);
  } finally {
    db.close();
  }
  rmSync(artifactDir(), { recursive: true, force: true });
  try {
    rmdirSync(dirname(artifactDir())); // the model's folder, when this test made it
  } catch {
    // not empty: other artifacts of the model live there
  }
}

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${server!.root}/metrics`)).text();
  return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "gm"))].reduce((sum, m) => sum + Number(m[1]), 0);
}

async function show(hash: string): Promise<void> {
  await page.goto(`${server!.root}/${hash}`, { waitUntil: "load" });
}

async function screenshot(name: string): Promise<void> {
  await page.screenshot({ path: join(SHOTS, `${name}.png`) as `${string}.png`, fullPage: true });
}

/** Sets a control's value as typing would, firing its input and change events. */
async function fill(label: string, value: string): Promise<void> {
  const handle = await page.waitForSelector(`::-p-aria(${label})`);
  await handle!.evaluate((node, v) => {
    (node as HTMLInputElement).value = v;
    node.dispatchEvent(new Event("input", { bubbles: true }));
    node.dispatchEvent(new Event("change", { bubbles: true }));
  }, value);
}

const text = (selector: string) => page.$eval(selector, (node) => node.textContent ?? "");

/** Presses Tab from the top of the page until focus comes back round; every enabled, visible control must have been reached. */
async function tabReachesEverything(): Promise<void> {
  // From the first control (the skip link), as after loading the page.
  await page.evaluate(() => document.querySelector<HTMLElement>(".skip")!.focus());
  const reached = new Set<string>();
  for (let i = 0; i < 200; i++) {
    if (i > 0) await page.keyboard.press("Tab");
    const id = await page.evaluate(() => {
      const node = document.activeElement as HTMLElement & { __tabId?: string };
      if (!node || node === document.body) return "";
      node.dataset.tabId ||= String(Math.random());
      return node.dataset.tabId;
    });
    // Round again (or out to the browser's own controls): done. An element met twice in a row is one
    // with inner controls (the audio player's buttons).
    if (id === "" || (i > 0 && id === [...reached][0])) break;
    reached.add(id);
  }
  const missed = await page.evaluate(
    (ids: string[]) => {
      const controls = [...document.querySelectorAll<HTMLElement>("a[href], button, input, select, textarea, summary, [tabindex='0']")];
      return controls
        .filter((c) => !(c as HTMLButtonElement).disabled && c.checkVisibility() && !ids.includes(c.dataset.tabId ?? ""))
        .map((c) => c.outerHTML.slice(0, 80));
    },
    [...reached],
  );
  expect(missed).toEqual([]);
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  speechFixture("lighthouse");
  removeTrack();
  seedTrack();
  mkdirSync(artifactDir(), { recursive: true });
  writeFileSync(join(artifactDir(), "manifest.json"), JSON.stringify({ id: ARTIFACT, slug: TRACKED, choices: [] }));
  server = await startServer(TEXT, ["--model", SPEECH]);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--window-size=1280,900", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`${page.url()}: ${m.text()}`);
  });
  page.on("pageerror", (err) => errors.push(`${page.url()}: ${String(err)}`));
  page.on("dialog", (dialog) => void dialog.accept());
});

afterAll(async () => {
  await browser?.close();
  await stopServer(server);
  removeTrack();
});

describe("the web console", () => {
  it("serves the page and its assets with no key, and only from its own origin", async () => {
    const html = await fetch(`${server!.root}/`);
    expect(html.status).toBe(200);
    expect(html.headers.get("content-security-policy")).toContain("default-src 'self'");
    const body = await html.text();
    expect(body).not.toMatch(/https?:\/\//);
    expect((await fetch(`${server!.root}/console/app.js`)).status).toBe(200);
    expect((await fetch(`${server!.root}/console/app.css`)).status).toBe(200);
  });

  it("streams a chat answer with its TTFT and tokens/s, and Stop cancels a generation on the server", async () => {
    await show("#/chat");
    await page.waitForFunction((slug) => [...document.querySelectorAll("option")].some((o) => o.value === slug), {}, TEXT);
    await page.select("::-p-aria(Model)", TEXT);
    await fill("Temperature", "0");
    await fill("Max tokens", "24");
    await page.type("::-p-aria(Message)", "Name three primary colors.");
    await page.click("::-p-aria(Send)");
    await page.waitForFunction(() => /finish: \w+/.test(document.querySelector(".stats")?.textContent ?? ""), { timeout: 60_000 });
    const answer = await text("[role=log] .msg.assistant");
    expect(answer.toLowerCase()).toContain("red");
    expect(await text(".stats")).toMatch(/TTFT \d+ ms · [\d.]+ tokens\/s · \d+ tokens · finish: (stop|length)/);
    expect(await page.$eval("pre.curl", (n) => n.textContent)).toContain("/v1/chat/completions");
    await screenshot("chat");

    // A JSON schema from the page constrains the answer.
    const format = `::-p-aria([name="Response format"][role="combobox"])`;
    await page.select(format, "json_schema");
    await fill(`[name="JSON schema"][role="textbox"]`, JSON.stringify({ type: "object", properties: { color: { type: "string" } }, required: ["color"] }));
    await page.type("::-p-aria(Message)", "Name a color.");
    await page.click("::-p-aria(Send)");
    await page.waitForFunction(() => document.querySelectorAll("[role=log] .msg.assistant")[1]?.querySelector(".meta")?.textContent, { timeout: 60_000 });
    const json = await page.$$eval("[role=log] .msg.assistant", (answers) => answers[1].firstChild!.textContent!);
    expect(typeof (JSON.parse(json) as { color: unknown }).color).toBe("string");
    await page.select(format, "text");

    const cancelled = await metric("kiln_requests_cancelled_total");
    await fill("Max tokens", "2000");
    await fill("Temperature", "0.8");
    await page.type("::-p-aria(Message)", "Write a very long story about a dragon and a castle.");
    await page.click("::-p-aria(Send)");
    await page.waitForFunction(() => (document.querySelectorAll("[role=log] .msg.assistant")[2]?.firstChild?.textContent ?? "").length > 10, {
      timeout: 60_000,
    });
    await page.click("::-p-aria(Stop)");
    await page.waitForFunction(() => (document.querySelector(".stats")?.textContent ?? "").includes("stopped"));
    for (let i = 0; i < 50 && (await metric("kiln_requests_cancelled_total")) === cancelled; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await metric("kiln_requests_cancelled_total")).toBe(cancelled + 1);
    await tabReachesEverything();

    // On a phone's width the columns stack and nothing runs off the side.
    await page.setViewport({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await screenshot("chat-narrow");
    await page.setViewport({ width: 1280, height: 900 });
  });

  it("shows a reasoning model's thinking folded in its answer, streamed as it comes", async () => {
    // SmolLM2 served with a template that opens the reasoning, as DeepSeek-R1 distills' templates do: its whole answer is thinking.
    const reasoner = await startServer(TEXT, ["--chat-template-file", join(import.meta.dirname, "../../fixtures/templates/served/chatml-think.jinja")]);
    try {
      await page.goto(`${reasoner.root}/#/chat`, { waitUntil: "load" });
      await page.waitForFunction((slug) => [...document.querySelectorAll("option")].some((o) => o.value === slug), {}, TEXT);
      await page.select("::-p-aria(Model)", TEXT);
      await fill("Temperature", "0");
      await fill("Max tokens", "16");
      await page.type("::-p-aria(Message)", "What is 2+2?");
      await page.click("::-p-aria(Send)");
      await page.waitForFunction(() => /finish: \w+/.test(document.querySelector(".stats")?.textContent ?? ""), { timeout: 60_000 });
      const res = await fetch(`${reasoner.baseURL}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: TEXT, messages: [{ role: "user", content: "What is 2+2?" }], max_tokens: 16, temperature: 0 }),
      });
      const expected = ((await res.json()) as { choices: Array<{ message: { reasoning_content: string } }> }).choices[0].message.reasoning_content;
      expect(expected.length).toBeGreaterThan(0);
      const shown = await page.$eval("[role=log] .msg.assistant .thinking", (d) => ({
        summary: d.querySelector("summary")!.textContent,
        text: d.lastChild!.textContent,
      }));
      expect(shown).toEqual({ summary: "Thinking", text: expected });
      expect(await text(".stats")).toMatch(/\d+ tokens · finish: (stop|length)/);
      await page.click("[role=log] .msg.assistant .thinking summary");
      await screenshot("chat-thinking");
    } finally {
      expect(await stopServer(reasoner)).toBe(0);
    }
  });

  it("transcribes an uploaded WAV and lists its segments with their times", async () => {
    await show("#/transcribe");
    await page.waitForFunction((slug) => [...document.querySelectorAll("option")].some((o) => o.value === slug), {}, SPEECH);
    const input = await page.waitForSelector("input[type=file]");
    await (input as unknown as { uploadFile(path: string): Promise<void> }).uploadFile(speechFixture("lighthouse").files.wav);
    await page.click(`::-p-aria([name="Transcribe"][role="button"])`);
    await page.waitForSelector(".segments li, .error-text", { timeout: 60_000 });
    expect(await page.$eval(".error-text", (n) => n.textContent).catch(() => null)).toBeNull();
    expect((await text(".transcript-text")).toLowerCase()).toContain("painted the railing");
    expect(await text(".segments .time")).toMatch(/^0:00\.00 → 0:0\d\.\d\d$/);
    await screenshot("transcribe");
    await tabReachesEverything();

    // A recording from the (fake) microphone becomes the upload, and is transcribed.
    await page.click("::-p-aria(Record)");
    await page.waitForFunction(() => document.querySelector(".stats")?.textContent === "Recording…");
    await new Promise((r) => setTimeout(r, 1500));
    await page.click("::-p-aria(Stop recording)");
    await page.waitForFunction(() => (document.querySelector("input[type=file]") as HTMLInputElement).files?.[0]?.name.startsWith("recording."));
    await page.click(`::-p-aria([name="Transcribe"][role="button"])`);
    await page.waitForFunction(() => /^Done in|error/.test(document.querySelector(".stats")?.textContent ?? "") || document.querySelector(".error-text"), {
      timeout: 60_000,
    });
    expect(await page.$(".error-text")).toBeNull();
    expect(await text(".stats")).toMatch(/^Done in [\d.]+ s/);
    await screenshot("transcribe-recording");
  });

  it("lists the catalogue and plots a model's track from its records", async () => {
    await show("#/models");
    await page.waitForSelector("tbody tr");
    expect(await page.$$eval("tbody tr", (rows) => rows.length)).toBe(42);
    // Each row's Device cell: the served models' device, a dash for the others.
    const devices = await page.$$eval("tbody tr", (rows) => {
      const column = [...document.querySelectorAll("thead th")].findIndex((th) => th.textContent === "Device");
      return Object.fromEntries(rows.map((r) => [r.querySelector("th div")?.textContent, r.children[column]?.textContent]));
    });
    expect(devices[TEXT]).toBe("cpu");
    expect(devices[SPEECH]).toBe("cpu");
    expect(devices[TRACKED]).toBe("–");
    await screenshot("models");
    await tabReachesEverything();

    await show(`#/models/${TRACKED}`);
    await page.waitForSelector("[data-chart=throughput] canvas");
    expect(await page.$$eval(".table-wrap tbody tr", (rows) => rows.length)).toBe(5);
    expect(await text(".table-wrap tbody")).toContain("21% faster decode");
    // The plot has drawn lines: many of its canvas pixels are painted.
    const painted = await page.$eval("[data-chart=throughput] canvas", (canvas) => {
      const c = canvas as HTMLCanvasElement;
      const pixels = c.getContext("2d")!.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) n++;
      return n;
    });
    expect(painted).toBeGreaterThan(2000);
    await screenshot("track");

    // The operator promotes the measured winner from its row, then rolls it back.
    await page.click(`::-p-aria(Promote ${ARTIFACT})`);
    await page.waitForFunction((a) => document.querySelector("[role=status]")?.textContent?.includes(`serving ${a}`), {}, ARTIFACT);
    await page.waitForFunction((a) => document.body.textContent?.includes(`Serving ${a}, promoted`), {}, ARTIFACT);
    await page.click("::-p-aria(Roll back)");
    await page.waitForFunction((a) => document.querySelector("[role=status]")?.textContent?.includes(`rolled back ${a}`), {}, ARTIFACT);
    await page.waitForFunction(() => document.body.textContent?.includes("Serving the default compile"));
    await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "dark" }]);
    await show("#/models");
    await show(`#/models/${TRACKED}`);
    await page.waitForSelector("[data-chart=throughput] canvas");
    expect(await page.evaluate(() => getComputedStyle(document.body).backgroundColor)).toBe("rgb(21, 23, 27)");
    await screenshot("track-dark");
    await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
    await tabReachesEverything();
  });

  it("shows the server's numbers moving under load", async () => {
    await show("#/server");
    const value = (metric: string) => page.$eval(`[data-metric=${metric}]`, (n) => Number(n.textContent)).catch(() => NaN);
    await page.waitForSelector("[data-metric=completion-tokens]", { timeout: 10_000 });
    const before = await value("completion-tokens");
    const load = Array.from({ length: 4 }, (_, i) =>
      fetch(`${server!.baseURL}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: TEXT,
          messages: [{ role: "user", content: "Write a very long story about a dragon and a castle." }],
          max_tokens: 200,
          temperature: 0.8,
          seed: i,
        }),
      }).then((r) => r.json()),
    );
    let [running, rate] = [0, 0];
    for (let i = 0; i < 100 && (running === 0 || rate === 0); i++) {
      await new Promise((r) => setTimeout(r, 200));
      running = Math.max(running, await value("running"));
      rate = Math.max(rate, await value("tokens-per-second"));
    }
    expect(running).toBeGreaterThan(0);
    expect(rate).toBeGreaterThan(0);
    // Three charts over time, and the TTFT and queue-time histograms.
    expect(await page.$$eval(".chart canvas", (canvases) => canvases.length)).toBe(5);
    await screenshot("server");
    await Promise.all(load);
    await page.waitForFunction((b) => Number(document.querySelector("[data-metric=completion-tokens]")?.textContent) > b, {}, before);
    await tabReachesEverything();
  });

  it("logged no error on any page", () => {
    expect(errors).toEqual([]);
  });
});
