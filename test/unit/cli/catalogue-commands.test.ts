import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import compileCommand from "../../../src/cli/commands/compile.js";
import modelsCommand, * as models from "../../../src/cli/commands/models.js";
import pullCommand, * as pull from "../../../src/cli/commands/pull.js";
import rmCommand from "../../../src/cli/commands/rm.js";
import { localFootprint } from "../../../src/catalogue/local-store.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { promoteArtifact } from "../../../src/catalogue/promotions.js";
import { COMPILER_VERSION } from "../../../src/compiler/compile.js";
import { MODELS } from "../../../src/catalogue/models.js";
import { capture } from "./capture.js";

describe("kiln models", () => {
  it("exports the command shape", () => {
    expect(modelsCommand.name).toBe("models");
    expect(typeof modelsCommand.description).toBe("string");
    expect(modelsCommand.help).toMatch(/^Usage: kiln models \[options\]\n/);
  });

  it("prints an aligned table of all 42 models", async () => {
    const { out, io } = capture();
    expect(await modelsCommand.run([], io)).toBe(0);
    const lines = out.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(43);
    expect(lines[0]).toMatch(/^SLUG\s+KIND\s+PARAMS\s+CONTEXT\s+PRICE \(USD\)\s+LICENCE\s+LOCAL\s+COMPILE$/);
    // Aligned: every row's KIND column starts where the header's does.
    const kindAt = lines[0]!.indexOf("KIND");
    for (const line of lines.slice(1)) expect(line.slice(kindAt)).toMatch(/^(text|transcription)/);
    const llama = lines.find((l) => l.startsWith("llama-3-3-70b-instruct "))!;
    expect(llama).toContain("70.6B");
    expect(llama).toContain("131,072");
    expect(llama).toContain("$0.09 in / $0.14 out per 1M tok");
    expect(lines.find((l) => l.startsWith("whisper-large-v3 "))).toContain("$0.02 / audio min");
    expect(lines.find((l) => l.startsWith("smollm2-135m-instruct "))).toContain("135M");
    // Whether this kiln compiles it here: yes, or no with the reason.
    for (const line of lines.slice(1)) expect(line).toMatch(/  (yes|yes \(serving needs ~\d+ GiB memory\)|no: .+)$/);
    expect(lines.find((l) => l.startsWith("smollm2-135m-instruct "))).toMatch(/  yes$/);
  });

  it("filters by kind, prints JSON and handles --help and bad arguments", async () => {
    let c = capture();
    expect(await modelsCommand.run(["--kind", "transcription"], c.io)).toBe(0);
    expect(c.out.stdout.trimEnd().split("\n")).toHaveLength(1 + MODELS.filter((m) => m.kind === "transcription").length);
    c = capture();
    expect(await modelsCommand.run(["--json"], c.io)).toBe(0);
    const all = JSON.parse(c.out.stdout);
    expect(all).toHaveLength(42);
    expect(all.find((m: { slug: string }) => m.slug === "smollm2-135m-instruct").compile).toMatchObject({
      compilable: true,
      architecture: { name: "llama", supported: true },
    });
    c = capture();
    expect(await modelsCommand.run(["--kind=text", "--json"], c.io)).toBe(0);
    expect(JSON.parse(c.out.stdout)).toHaveLength(MODELS.filter((m) => m.kind === "text").length);
    c = capture();
    expect(await modelsCommand.run(["--help"], c.io)).toBe(0);
    expect(c.out.stdout).toBe(`${modelsCommand.help}\n`);
    for (const option of ["--kind text|transcription", "--json", "-h, --help"]) expect(c.out.stdout).toContain(option);
    c = capture();
    expect(await modelsCommand.run(["--bogus"], c.io)).toBe(2);
    expect(c.out.stderr).toBe(`kiln models: unknown option --bogus\n\n${modelsCommand.help}\n`);
    c = capture();
    expect(await modelsCommand.run(["--kind", "speech"], c.io)).toBe(2);
    expect(c.out.stderr).toMatch(/^kiln models: --kind needs text or transcription \(got "speech"\)\n/);
    c = capture();
    expect(await modelsCommand.run(["text"], c.io)).toBe(2);
    expect(c.out.stderr).toMatch(/^kiln models: unexpected argument text\n/);
  });

  it("formats numbers", () => {
    expect(models.formatParameters(135e6)).toBe("135M");
    expect(models.formatParameters(1.55e9)).toBe("1.55B");
    expect(models.formatParameters(140.6e9)).toBe("141B");
    expect(models.formatUsd(0.1)).toBe("$0.10");
    expect(models.formatUsd(0.005)).toBe("$0.005");
  });
});

describe("kiln pull", () => {
  it("exports the command shape and prints help", async () => {
    expect(pullCommand.name).toBe("pull");
    // test/model/catalogue/pull-python.test.ts imports the named run.
    expect(pull.run).toBe(pullCommand.run);
    const { out, io } = capture();
    expect(await pullCommand.run(["-h"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln pull <slug>\.\.\. \[options\]\n/);
    for (const option of ["-q, --quiet", "--rehash"]) expect(out.stdout).toContain(option);
  });

  it("wants a slug, and says so", async () => {
    const { out, io } = capture();
    expect(await pullCommand.run([], io)).toBe(2);
    expect(out.stderr).toMatch(/^kiln pull: which model\?/);
    expect(out.stderr).toContain("Usage: kiln pull");
  });

  it("fails an unknown slug with one line and exit code 1", async () => {
    const { out, io } = capture();
    expect(await pullCommand.run(["no-such-model"], io)).toBe(1);
    expect(out.stderr).toBe("kiln pull: unknown model: no-such-model (run `kiln models` for the list)\n");
  });
});

describe("kiln compile", () => {
  it("refuses --activations float16 without --device webgpu before compiling anything: usage error, exit 2", async () => {
    const { out, io } = capture();
    expect(await compileCommand.run(["whisper-tiny-en", "--activations", "float16"], io)).toBe(2);
    expect(out.stdout).toBe("");
    expect(out.stderr).toMatch(/^kiln compile: --activations float16 is the precision of a GPU artifact: add --device webgpu\n\nUsage: kiln compile /);
  });
});

describe("kiln rm and kiln models --local", () => {
  let home: string;
  let saved: string | undefined;
  const file = (path: string, bytes: number) => {
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, Buffer.alloc(bytes));
  };
  beforeEach(() => {
    saved = process.env.KILN_HOME;
    home = mkdtempSync(join(tmpdir(), "kiln-rm-"));
    process.env.KILN_HOME = home;
    file(join(home, "models", "smollm2-135m-instruct", "model.gguf"), 3 * 1024 * 1024);
    file(join(home, "artifacts", "smollm2-135m-instruct", "a1", "model.onnx.data"), 1024 * 1024);
    file(join(home, "artifacts", "whisper-tiny-en", "w1", "encoder.onnx.data"), 2048);
  });
  afterEach(() => {
    process.env.KILN_HOME = saved;
    rmSync(home, { recursive: true, force: true });
  });

  it("lists only what is kept, with its size on disk, as a table and as JSON", async () => {
    let c = capture();
    expect(await modelsCommand.run(["--local"], c.io)).toBe(0);
    const lines = c.out.stdout.trimEnd().split("\n");
    expect(lines.map((l) => l.split(/\s+/)[0])).toEqual(["SLUG", "smollm2-135m-instruct", "whisper-tiny-en"]);
    expect(lines[1]).toMatch(/  4\.0 MiB  yes$/);
    expect(lines[2]).toMatch(/  2\.0 KiB  yes$/);
    c = capture();
    expect(await modelsCommand.run(["--local", "--kind", "text", "--json"], c.io)).toBe(0);
    expect(JSON.parse(c.out.stdout).map((m: { slug: string; local: unknown }) => [m.slug, m.local])).toEqual([
      ["smollm2-135m-instruct", { weights_bytes: 3 * 1024 * 1024, artifacts: [{ id: "a1", bytes: 1024 * 1024 }] }],
    ]);
    c = capture();
    expect(await modelsCommand.run(["--json"], c.io)).toBe(0);
    expect(JSON.parse(c.out.stdout).find((m: { slug: string }) => m.slug === "qwen-3-8b").local).toBeNull();
  });

  it("--local lists the models compiled from local GGUF files after the catalogue's, from their artifacts' manifests", async () => {
    file(join(home, "artifacts", "my-model-q4_k_m", "m1", "model.onnx.data"), 4096);
    const manifest = {
      id: "m1",
      slug: "my-model-q4_k_m",
      kind: "text",
      createdAt: "2026-11-28T00:00:00Z",
      shape: { contextLength: 4096 },
      source: { file: "/data/my-model-Q4_K_M.gguf" },
    };
    writeFileSync(join(home, "artifacts", "my-model-q4_k_m", "m1", "manifest.json"), JSON.stringify(manifest));
    file(join(home, "artifacts", "half-written", "h1", "model.onnx.data"), 10);
    let c = capture();
    expect(await modelsCommand.run(["--local"], c.io)).toBe(0);
    const lines = c.out.stdout.trimEnd().split("\n");
    expect(lines.map((l) => l.split(/\s+/)[0])).toEqual(["SLUG", "smollm2-135m-instruct", "whisper-tiny-en", "half-written", "my-model-q4_k_m"]);
    expect(lines[4]).toMatch(/^my-model-q4_k_m\s+text\s+-\s+4,096\s+local file\s+-\s+4\.2 KiB\s+-$/);
    expect(lines[3]).toMatch(/^half-written\s+-\s+-\s+-\s+local file/);
    c = capture();
    expect(await modelsCommand.run(["--local", "--json", "--kind", "text"], c.io)).toBe(0);
    expect(JSON.parse(c.out.stdout).at(-1)).toEqual({
      slug: "my-model-q4_k_m",
      kind: "text",
      contextLength: 4096,
      sourceFile: "/data/my-model-Q4_K_M.gguf",
      local: { weights_bytes: 0, artifacts: [{ id: "m1", bytes: 4096 + JSON.stringify(manifest).length }] },
    });
    // Without --local the list is the catalogue's.
    c = capture();
    expect(await modelsCommand.run([], c.io)).toBe(0);
    expect(c.out.stdout).not.toMatch(/my-model/);
  });

  it("deletes the artifacts alone, then everything, and says what it freed; a model not kept is an error", async () => {
    let c = capture();
    expect(await rmCommand.run(["--artifacts", "smollm2-135m-instruct"], c.io)).toBe(0);
    expect(c.out.stdout).toBe("smollm2-135m-instruct: deleted 1 artifact, 1.0 MiB freed\n");
    expect(existsSync(join(home, "models", "smollm2-135m-instruct", "model.gguf"))).toBe(true);
    c = capture();
    expect(await rmCommand.run(["--artifacts", "smollm2-135m-instruct"], c.io)).toBe(1);
    expect(c.out.stderr).toBe(`kiln rm: no compiled artifact 'smollm2-135m-instruct' is kept in ${home}\n`);
    c = capture();
    expect(await rmCommand.run(["smollm2-135m-instruct", "qwen-3-8b", "whisper-tiny-en", "../models"], c.io)).toBe(1);
    expect(c.out.stdout).toBe("smollm2-135m-instruct: deleted the weights, 3.0 MiB freed\nwhisper-tiny-en: deleted 1 artifact, 2.0 KiB freed\n");
    expect(c.out.stderr).toBe(`kiln rm: no model 'qwen-3-8b' is kept in ${home}\nkiln rm: no model '../models' is kept in ${home}\n`);
    c = capture();
    expect(await modelsCommand.run(["--local"], c.io)).toBe(0);
    expect(c.out.stdout.trimEnd().split("\n")).toHaveLength(1);
    c = capture();
    expect(await rmCommand.run([], c.io)).toBe(2);
    expect(c.out.stderr).toMatch(/^kiln rm: which model\?/);
  });

  it("--stale deletes the artifacts of earlier compilers that no promotion names, of every model or the ones named", async () => {
    const artifact = (slug: string, id: string, compilerVersion?: string) => {
      file(join(home, "artifacts", slug, id, "model.onnx.data"), 1024);
      if (compilerVersion) writeFileSync(join(home, "artifacts", slug, id, "manifest.json"), JSON.stringify({ id, slug, compilerVersion }));
    };
    artifact("smollm2-135m-instruct", "old", "0.0.1");
    artifact("smollm2-135m-instruct", "old-promoted", "0.0.1");
    artifact("smollm2-135m-instruct", "old-rolled-back-to", "0.0.2");
    artifact("smollm2-135m-instruct", "current", COMPILER_VERSION);
    artifact("smollm2-135m-instruct", "being-written");
    artifact("whisper-tiny-en", "old", "0.0.1");
    const db = openDatabase();
    promoteArtifact(db, { slug: "smollm2-135m-instruct", artifactId: "old-rolled-back-to", reason: "operator" });
    promoteArtifact(db, { slug: "smollm2-135m-instruct", artifactId: "old-promoted", reason: "operator" });
    db.close();
    let c = capture();
    expect(await rmCommand.run(["--stale", "smollm2-135m-instruct"], c.io)).toBe(0);
    expect(c.out.stdout).toBe("smollm2-135m-instruct: deleted 1 artifact of earlier compilers, 1.1 KiB freed\n");
    const left = (slug: string) =>
      localFootprint(slug, home)!
        .artifacts.map((a) => a.id)
        .sort();
    expect(left("smollm2-135m-instruct")).toEqual(["a1", "being-written", "current", "old-promoted", "old-rolled-back-to"]);
    expect(left("whisper-tiny-en")).toEqual(["old", "w1"]);
    c = capture();
    expect(await rmCommand.run(["--stale"], c.io)).toBe(0);
    expect(c.out.stdout).toBe("whisper-tiny-en: deleted 1 artifact of earlier compilers, 1.1 KiB freed\n");
    c = capture();
    expect(await rmCommand.run(["--stale"], c.io)).toBe(0);
    expect(c.out.stdout).toBe(`no stale artifact in ${home}\n`);
    expect(existsSync(join(home, "models", "smollm2-135m-instruct", "model.gguf"))).toBe(true);
    c = capture();
    expect(await rmCommand.run(["--stale", "--artifacts"], c.io)).toBe(2);
  });
});
