/**
 * Speech on the WebGPU device, end to end: the real `kiln serve --device webgpu` with whisper-tiny-en
 * on this machine's adapter (Mesa's lavapipe where there is no GPU, about 20x slower than the CPU
 * provider: one short sentence, decoded greedily), against the same server on the CPU; and from the
 * float16 GPU artifact (`--activations float16`).
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { KILN_BIN, type RunningServer, startServer, stopServer } from "../../support/server.js";
import { speechFixture } from "../../support/speech.js";
import { wordErrorRate } from "../../support/wer.js";

const SLUG = "whisper-tiny-en";
let server: RunningServer | undefined;

afterEach(async () => {
  if (server) expect(await stopServer(server)).toBe(0);
  server = undefined;
});

async function transcribe(s: RunningServer, path: string): Promise<string> {
  const form = new FormData();
  form.append("model", SLUG);
  // Greedy: the comparison is of devices, and each beam would be a decoder row at lavapipe's pace.
  form.append("beam_size", "1");
  form.append("file", new Blob([readFileSync(path)]), "speech.wav");
  const res = await fetch(`${s.baseURL}/audio/transcriptions`, { method: "POST", body: form });
  expect(res.status).toBe(200);
  return ((await res.json()) as { text: string }).text;
}

describe("speech on the WebGPU device", () => {
  let onCpu = "";
  let cpuSeconds = 0;
  let cpuArtifact: string | undefined;
  let gpuArtifact: string | undefined;
  /** The artifact a server says it serves the model from. */
  const artifactOf = (s: RunningServer) => /serving \(artifact ([^;)]+)/.exec(s.stderr())?.[1];
  const sentence = () => speechFixture("lighthouse");

  it("transcribes on the CPU device (the reference)", async () => {
    server = await startServer(SLUG, ["--device", "cpu"]);
    expect(server.stderr()).toContain("models on cpu)");
    cpuArtifact = artifactOf(server);
    expect(cpuArtifact, server.stderr()).toBeDefined();
    const t0 = performance.now();
    onCpu = await transcribe(server, sentence().files.wav);
    cpuSeconds = (performance.now() - t0) / 1000;
    expect(wordErrorRate(sentence().text, onCpu)).toBeLessThanOrEqual(0.3);
  }, 300_000);

  it("transcribes the same words on --device webgpu, and says so in the startup line, /health, /metrics and /v1/models", async () => {
    server = await startServer(SLUG, ["--device", "webgpu"]);
    const adapter = /models on webgpu on ([^;)]+?)(?: \(software, on the CPU\))?\); /.exec(server.stderr())?.[1];
    expect(adapter, server.stderr()).toBeDefined();
    // The GPU speech artifact (its encoder's attention on the device), not the CPU one.
    expect(artifactOf(server)).toMatch(/^whisper-tiny-en-/);
    expect(artifactOf(server)).not.toBe(cpuArtifact);
    gpuArtifact = artifactOf(server);
    const t0 = performance.now();
    const onWebGpu = await transcribe(server, sentence().files.wav);
    console.log(
      `webgpu on ${adapter}: ${((performance.now() - t0) / 1000).toFixed(1)} s for ${sentence().seconds.toFixed(1)} s of audio: "${onWebGpu}" (CPU: ${cpuSeconds.toFixed(1)} s, "${onCpu}")`,
    );
    expect(wordErrorRate(onCpu, onWebGpu)).toBeLessThanOrEqual(0.1);
    const health = (await (await fetch(`${server.root}/health`)).json()) as { device: { name: string; adapter: string } };
    expect(health.device).toMatchObject({ name: "webgpu", adapter });
    expect(await (await fetch(`${server.root}/metrics`)).text()).toMatch(/^kiln_device_info\{adapter="[^"]+",device="webgpu",software="(true|false)"\} 1$/m);
    expect(await (await fetch(`${server.baseURL}/models/${SLUG}`)).json()).toMatchObject({ status: "serving", device: "webgpu" });
    // onnxruntime's warnings about the shape arithmetic left to the CPU provider on purpose stay out of the operator's log.
    expect(server.stderr()).not.toMatch(/\[W:onnxruntime/);
  }, 600_000);

  it("transcribes the same words from the float16 GPU artifact with --activations float16", async () => {
    server = await startServer(SLUG, ["--device", "webgpu", "--activations", "float16"]);
    const artifact = artifactOf(server);
    expect(artifact, server.stderr()).toMatch(/^whisper-tiny-en-/);
    expect(artifact).not.toBe(cpuArtifact);
    expect(artifact).not.toBe(gpuArtifact);
    const t0 = performance.now();
    const onHalf = await transcribe(server, sentence().files.wav);
    console.log(`webgpu float16: ${((performance.now() - t0) / 1000).toFixed(1)} s: "${onHalf}" (CPU: "${onCpu}")`);
    expect(wordErrorRate(onCpu, onHalf)).toBeLessThanOrEqual(0.1);
  }, 600_000);

  it("--device webgpu without a Vulkan driver exits with one line saying so", () => {
    const run = spawnSync(process.execPath, [KILN_BIN, "serve", "--device", "webgpu", "--port", "0", "--no-nightly"], {
      env: { ...process.env, VK_DRIVER_FILES: "/nonexistent/vulkan/icd.json", VK_ICD_FILENAMES: "" },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(run.status).toBe(1);
    const kilnLines = run.stderr.split("\n").filter((line) => line.startsWith("kiln serve:"));
    expect(kilnLines).toEqual([expect.stringMatching(/^kiln serve: --device webgpu: no WebGPU adapter \(.+\); .* or use --device cpu$/)]);
  });
});
