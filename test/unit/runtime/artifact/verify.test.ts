/**
 * Artifact integrity: the manifest's `files` (size and sha256 of each file) against the folder, with
 * the verification stamp that spares re-hashing files that did not change.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { compileGguf, COMPILER_VERSION } from "../../../../src/compiler/compile.js";
import {
  type ArtifactManifest,
  checkArtifactSizes,
  readManifest,
  sha256OfFile,
  VERIFIED_STAMP,
  verifyArtifact,
} from "../../../../src/runtime/artifact/index.js";
import { writeTinyGguf } from "../../provision/tiny-gguf.js";

let home: string;
let dir: string;
let manifest: ArtifactManifest;
let hashed: string[];
const countingHash = (path: string) => {
  hashed.push(path.slice(dir.length + 1));
  return sha256OfFile(path);
};

/** Overwrites a file in place with other bytes of the same size and puts its mtime back. */
function scribble(path: string): void {
  const st = statSync(path);
  writeFileSync(path, randomBytes(st.size));
  utimesSync(path, st.atimeMs / 1000, st.mtimeMs / 1000);
  expect(Math.abs(statSync(path).mtimeMs - st.mtimeMs)).toBeLessThan(1); // what a size + mtime check would accept
}

beforeEach(async () => {
  home = mkdtempSync(join(tmpdir(), "kiln-verify-"));
  await writeTinyGguf(join(home, "tiny.gguf"));
  const compiled = await compileGguf({ slug: "tiny", ggufPath: join(home, "tiny.gguf"), home });
  dir = compiled.dir;
  manifest = readManifest(dir);
  hashed = [];
});
afterEach(() => rmSync(home, { recursive: true, force: true }));

describe("the manifest's files", () => {
  it("lists every file of the folder but the manifest, with its size and sha256", async () => {
    expect(manifest.compilerVersion).toBe(COMPILER_VERSION);
    expect(manifest.files.map((f) => f.path)).toEqual(["chat_template.jinja", "model.onnx", "model.onnx.data", "tokenizer.json"]);
    for (const f of manifest.files) {
      expect(f.bytes).toBe(statSync(join(dir, f.path)).size);
      expect(f.sha256).toBe(await sha256OfFile(join(dir, f.path)));
    }
  });
});

describe("verifyArtifact", () => {
  it("passes a fresh artifact without hashing it again (the compiler stamped what it hashed)", async () => {
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual([]);
    expect(hashed).toEqual([]);
  });

  it("finds weights overwritten with random bytes of the right size, mtime restored", async () => {
    scribble(join(dir, "model.onnx.data"));
    expect(checkArtifactSizes(dir, manifest)).toEqual([]); // the size alone cannot tell
    const problems = await verifyArtifact(dir, manifest, { hash: countingHash });
    expect(problems).toEqual([{ file: "model.onnx.data", problem: expect.stringMatching(/^has sha256 [0-9a-f]{12}…, the manifest says [0-9a-f]{12}…$/) }]);
    expect(hashed).toEqual(["model.onnx.data"]); // only the file whose stamp changed
  });

  it("finds truncated weights by size, without hashing", async () => {
    const data = join(dir, "model.onnx.data");
    truncateSync(data, statSync(data).size - 100);
    const want = [{ file: "model.onnx.data", problem: `is ${statSync(data).size} bytes, the manifest says ${statSync(data).size + 100}` }];
    expect(checkArtifactSizes(dir, manifest)).toEqual(want);
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual(want);
    expect(hashed).toEqual([]);
  });

  it("finds a missing file", async () => {
    rmSync(join(dir, "tokenizer.json"));
    expect(await verifyArtifact(dir, manifest)).toEqual([{ file: "tokenizer.json", problem: "is missing" }]);
  });

  it("re-hashes a file whose stamp changed once, then trusts the new stamp", async () => {
    const data = join(dir, "model.onnx.data");
    const st = statSync(data);
    utimesSync(data, st.atime, new Date(st.mtimeMs + 5000)); // touched, content the same
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual([]);
    expect(hashed).toEqual(["model.onnx.data"]);
    hashed = [];
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual([]);
    expect(hashed).toEqual([]);
  });

  it("hashes everything when there is no stamp, or with full", async () => {
    rmSync(join(dir, VERIFIED_STAMP));
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual([]);
    expect(hashed.sort()).toEqual(manifest.files.map((f) => f.path));
    hashed = [];
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual([]);
    expect(hashed).toEqual([]);
    expect(await verifyArtifact(dir, manifest, { hash: countingHash, full: true })).toEqual([]);
    expect(hashed.sort()).toEqual(manifest.files.map((f) => f.path));
  });

  it("does not let a stamp from another artifact vouch for this one", async () => {
    const stamp = JSON.parse(readFileSync(join(dir, VERIFIED_STAMP), "utf8"));
    writeFileSync(join(dir, VERIFIED_STAMP), JSON.stringify({ ...stamp, artifactId: "other" }));
    expect(await verifyArtifact(dir, manifest, { hash: countingHash })).toEqual([]);
    expect(hashed.length).toBe(manifest.files.length);
  });

  it("asks for a rebuild of an artifact whose manifest lists no files (an older compiler's)", async () => {
    const { files: _files, ...old } = manifest;
    const problems = await verifyArtifact(dir, { ...old, compilerVersion: "0.2.0" } as ArtifactManifest);
    expect(problems).toEqual([{ file: "manifest.json", problem: expect.stringContaining("lists no file sizes and hashes (written by compiler 0.2.0") }]);
  });
});
