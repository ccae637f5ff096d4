/** What kiln keeps of models under a home, measured, and deleted: only inside the home, by the folders' own names. */
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { footprintBytes, localFootprint, localSlugs, removeLocal } from "../../../src/catalogue/local-store.js";

let root: string;
let home: string;

function file(path: string, bytes: number): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, Buffer.alloc(bytes));
}

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "kiln-local-store-"));
  home = join(root, "home");
  file(join(home, "models", "smollm2-135m-instruct", "model.gguf"), 1000);
  file(join(home, "models", "smollm2-135m-instruct", "pulled.json"), 20);
  file(join(home, "artifacts", "smollm2-135m-instruct", "a1", "model.onnx.data"), 300);
  file(join(home, "artifacts", "smollm2-135m-instruct", "a2", "model.onnx.data"), 400);
  file(join(home, "artifacts", "my-model-q4_k_m", "b1", "model.onnx.data"), 50);
  // Something beside the home that no name may reach, and a link to it inside.
  file(join(root, "outside", "keep.txt"), 7);
  symlinkSync(join(root, "outside"), join(home, "artifacts", "smollm2-135m-instruct", "a2", "link"));
});

afterEach(() => rmSync(root, { recursive: true, force: true }));

describe("the local store", () => {
  it("lists the kept slugs, and measures each one's weights and artifacts without following links", () => {
    expect(localSlugs(home)).toEqual(["my-model-q4_k_m", "smollm2-135m-instruct"]);
    const f = localFootprint("smollm2-135m-instruct", home)!;
    expect(f.weightsBytes).toBe(1020);
    expect(f.artifacts.sort((a, b) => a.id.localeCompare(b.id))).toEqual([
      { id: "a1", bytes: 300 },
      { id: "a2", bytes: 400 },
    ]);
    expect(footprintBytes(f)).toBe(1720);
    expect(localFootprint("my-model-q4_k_m", home)).toEqual({ slug: "my-model-q4_k_m", weightsBytes: 0, artifacts: [{ id: "b1", bytes: 50 }] });
    expect(localFootprint("whisper-tiny-en", home)).toBeNull();
    expect(localSlugs(join(root, "no-home"))).toEqual([]);
  });

  it("deletes the artifacts alone, or everything, and nothing outside the home", () => {
    expect(removeLocal("smollm2-135m-instruct", home, "artifacts")).toMatchObject({ weightsBytes: 0, artifacts: [{}, {}] });
    expect(existsSync(join(home, "artifacts", "smollm2-135m-instruct"))).toBe(false);
    expect(existsSync(join(home, "models", "smollm2-135m-instruct", "model.gguf"))).toBe(true);
    expect(existsSync(join(root, "outside", "keep.txt"))).toBe(true);
    expect(removeLocal("smollm2-135m-instruct", home, "all")).toMatchObject({ weightsBytes: 1020, artifacts: [] });
    expect(existsSync(join(home, "models", "smollm2-135m-instruct"))).toBe(false);
    expect(removeLocal("smollm2-135m-instruct", home, "all")).toBeNull();
    for (const name of ["..", "../outside", "../../home", "", ".", "models"]) expect(removeLocal(name, home, "all"), name).toBeNull();
    expect(existsSync(join(root, "outside", "keep.txt"))).toBe(true);
    expect(localSlugs(home)).toEqual(["my-model-q4_k_m"]);
  });
});
