/**
 * Integrity of what provisioning serves: a reused artifact whose files differ from its manifest is
 * rebuilt (or refused), and a source GGUF that changed after it was pulled (even with its mtime put
 * back) is pulled again, or refused, and never compiled. A local server stands in for the hub.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { RECORD_FILE } from "../../../src/catalogue/pull/store.js";
import type { HubSource } from "../../../src/catalogue/types.js";
import { compileGguf, SourceChangedError } from "../../../src/compiler/compile.js";
import { provisionArtifact, type ProvisionOptions } from "../../../src/provision/index.js";
import { writeTinyGguf } from "./tiny-gguf.js";

const SLUG = "smollm2-135m-instruct"; // any catalogue text model: the sources below replace its own
const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

let gguf: Buffer;
let server: http.Server;
let endpoint: string;
let serving: "ok" | "missing" = "ok";
let gets = 0;
let home: string;
let stages: string[];

beforeAll(async () => {
  const scratch = mkdtempSync(join(tmpdir(), "kiln-provision-src-"));
  await writeTinyGguf(join(scratch, "tiny.gguf"), 7);
  gguf = readFileSync(join(scratch, "tiny.gguf"));
  rmSync(scratch, { recursive: true, force: true });
  server = http.createServer((req, res) => {
    if (req.url !== "/test/tiny/resolve/main/tiny.gguf" || serving === "missing") {
      res.writeHead(404).end("not found");
      return;
    }
    if (req.method === "GET") gets++;
    res.writeHead(200, { "content-length": String(gguf.length), "content-type": "application/octet-stream" });
    res.end(req.method === "HEAD" ? undefined : gguf);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), "kiln-provision-"));
  serving = "ok";
  gets = 0;
  stages = [];
});
afterEach(() => rmSync(home, { recursive: true, force: true }));

/** The hub source, pinned as the catalogue pins files (sha256 and size), or not. */
function source(pinned = true): HubSource {
  return {
    type: "hub",
    repo: "test/tiny",
    revision: "main",
    format: "gguf",
    files: [{ path: "tiny.gguf", ...(pinned ? { sha256: sha256(gguf), bytes: gguf.length } : {}) }],
  };
}

function options(pinned = true): ProvisionOptions {
  return { home, pull: { sources: [source(pinned)], hubEndpoint: endpoint, hubToken: null, retries: 0 }, onStage: (s) => stages.push(s) };
}

const modelFile = () => join(home, "models", SLUG, "tiny.gguf");
const artifactIds = () => readdirSync(join(home, "artifacts", SLUG)).sort();

/** Overwrites a file in place with other bytes of the same size and puts its mtime back. */
function scribble(path: string, at = 0, length = statSync(path).size): void {
  const st = statSync(path);
  const bytes = readFileSync(path);
  randomBytes(length).copy(bytes, at);
  writeFileSync(path, bytes);
  utimesSync(path, st.atimeMs / 1000, st.mtimeMs / 1000);
  expect(statSync(path).size).toBe(st.size);
  expect(Math.abs(statSync(path).mtimeMs - st.mtimeMs)).toBeLessThan(1);
}

/** A byte range inside the GGUF's tensor data (the end of the file): still a valid GGUF once changed. */
const WEIGHT_BYTES = () => ({ at: gguf.length - 4096, length: 1024 });

describe("a reused artifact is verified", () => {
  it("rebuilds weights overwritten with random bytes of the right size", async () => {
    const first = await provisionArtifact(SLUG, options());
    expect(first.reused).toBe(false);
    const data = join(first.dir, "model.onnx.data");
    const good = readFileSync(data);
    scribble(data);
    expect(readFileSync(data).equals(good)).toBe(false);

    const again = await provisionArtifact(SLUG, options());
    expect(again.dir).toBe(first.dir);
    expect(readFileSync(data).equals(good)).toBe(true);
    expect(stages.some((s) => s.startsWith("rebuilding the artifact (model.onnx.data has sha256"))).toBe(true);
  });

  it("rebuilds truncated weights", async () => {
    const first = await provisionArtifact(SLUG, options());
    const data = join(first.dir, "model.onnx.data");
    const good = readFileSync(data);
    truncateSync(data, good.length - 64);

    const again = await provisionArtifact(SLUG, options());
    expect(again.dir).toBe(first.dir);
    expect(readFileSync(data).equals(good)).toBe(true);
    expect(stages.some((s) => s.startsWith(`rebuilding the artifact (model.onnx.data is ${good.length - 64} bytes, the manifest says ${good.length}`))).toBe(
      true,
    );
  });

  it("reuses an intact artifact without rebuilding or hashing its weights", async () => {
    const first = await provisionArtifact(SLUG, options());
    const data = join(first.dir, "model.onnx.data");
    const before = statSync(data);
    stages = [];
    const again = await provisionArtifact(SLUG, options());
    expect(again.reused).toBe(true);
    expect(stages.some((s) => s.startsWith("rebuilding"))).toBe(false);
    expect(statSync(data).ino).toBe(before.ino);
  });
});

describe("the source's hash is checked before compiling", () => {
  it("pulls again a GGUF changed in place with its mtime restored, and compiles the pulled content", async () => {
    const first = await provisionArtifact(SLUG, options());
    expect(gets).toBe(1);
    scribble(modelFile(), WEIGHT_BYTES().at, WEIGHT_BYTES().length);

    const again = await provisionArtifact(SLUG, options());
    expect(gets).toBe(2);
    expect(readFileSync(modelFile()).equals(gguf)).toBe(true);
    expect(again.manifest.source.sha256).toBe(sha256(gguf));
    expect(again.dir).toBe(first.dir);
    expect(artifactIds()).toEqual([first.manifest.id]); // nothing was compiled from the changed file
  });

  it("does the same when the catalogue pins no hash (the recorded one is the reference)", async () => {
    const first = await provisionArtifact(SLUG, options(false));
    scribble(modelFile(), WEIGHT_BYTES().at, WEIGHT_BYTES().length);
    const again = await provisionArtifact(SLUG, options(false));
    expect(again.manifest.source.sha256).toBe(sha256(gguf));
    expect(readFileSync(modelFile()).equals(gguf)).toBe(true);
    expect(artifactIds()).toEqual([first.manifest.id]);
  });

  it("refuses, naming the file, when the changed GGUF cannot be pulled again", async () => {
    const first = await provisionArtifact(SLUG, options());
    scribble(modelFile(), WEIGHT_BYTES().at, WEIGHT_BYTES().length);
    const changed = sha256(readFileSync(modelFile()));
    serving = "missing";

    await expect(provisionArtifact(SLUG, options())).rejects.toThrow(
      `tiny.gguf changed after it was pulled (sha256 ${changed}, recorded ${sha256(gguf)}) and fetching it again failed`,
    );
    expect(artifactIds()).toEqual([first.manifest.id]);
  });

  it("checks a file recorded by an older kiln (no ctime in pulled.json) by hashing it", async () => {
    const first = await provisionArtifact(SLUG, options());
    const recordPath = join(home, "models", SLUG, RECORD_FILE);
    const record = JSON.parse(readFileSync(recordPath, "utf8"));
    record.files = record.files.map(({ ctimeMs: _c, ino: _i, ...rest }: Record<string, unknown>) => rest);
    writeFileSync(recordPath, JSON.stringify(record));
    scribble(modelFile(), WEIGHT_BYTES().at, WEIGHT_BYTES().length);

    const again = await provisionArtifact(SLUG, options());
    expect(again.manifest.source.sha256).toBe(sha256(gguf));
    expect(readFileSync(modelFile()).equals(gguf)).toBe(true);
    expect(artifactIds()).toEqual([first.manifest.id]);
    // The record was rewritten with the new stamp.
    expect(JSON.parse(readFileSync(recordPath, "utf8")).files[0]).toMatchObject({ ctimeMs: expect.any(Number), ino: expect.any(Number) });
  });

  it("pulls again a GGUF that changes between the pull and the compile", async () => {
    const first = await provisionArtifact(SLUG, options());
    let changedOnce = false;
    const opts = options();
    const again = await provisionArtifact(SLUG, {
      ...opts,
      onStage: (s) => {
        stages.push(s);
        if (s === "hashing source" && !changedOnce) {
          changedOnce = true;
          scribble(modelFile(), WEIGHT_BYTES().at, WEIGHT_BYTES().length);
        }
      },
    });
    expect(stages).toContain(`${modelFile()} changed after it was pulled: pulling it again`);
    expect(again.manifest.source.sha256).toBe(sha256(gguf));
    expect(readFileSync(modelFile()).equals(gguf)).toBe(true);
    expect(artifactIds()).toEqual([first.manifest.id]);
  });

  it("compileGguf refuses a source whose hash is not the expected one, before compiling anything", async () => {
    const path = join(home, "tiny.gguf");
    writeFileSync(path, gguf);
    scribble(path, WEIGHT_BYTES().at, WEIGHT_BYTES().length);
    const err = await compileGguf({ slug: "tiny", ggufPath: path, home, sourceSha256: sha256(gguf) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SourceChangedError);
    expect((err as Error).message).toContain(`has sha256 ${sha256(readFileSync(path))}, but ${sha256(gguf)} was recorded for it`);
    expect(() => readdirSync(join(home, "artifacts", "tiny"))).toThrow();
  });
});
