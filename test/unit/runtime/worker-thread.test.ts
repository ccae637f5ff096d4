import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { threadEntry, WorkerThread } from "../../../src/runtime/worker-thread.js";

describe("WorkerThread", () => {
  const home = process.cwd();
  afterEach(() => process.chdir(home));

  it("names the TypeScript loader by an absolute file URL, not a package name the working directory resolves", () => {
    const { filename, execArgv } = threadEntry("./worker-thread-echo", import.meta.url);
    expect(filename).toBe(fileURLToPath(new URL("./worker-thread-echo.ts", import.meta.url)));
    expect(execArgv[0]).toBe("--import");
    expect(execArgv[1]).toMatch(/^file:\/\//);
    expect(existsSync(fileURLToPath(execArgv[1]))).toBe(true);
  });

  it("starts from TypeScript sources when the working directory is not kiln's", async () => {
    process.chdir(tmpdir());
    const { thread, info } = await WorkerThread.start<{ cwd: string; typescript: boolean }>("./worker-thread-echo", import.meta.url, { op: "load" });
    try {
      expect(info).toEqual({ cwd: process.cwd(), typescript: true });
      const bytes = new Uint8Array(16);
      expect(await thread.run({ op: "echo", bytes }, [bytes.buffer])).toEqual({ op: "echo", length: 16 });
      expect(bytes.byteLength).toBe(0); // moved to the thread, not copied
    } finally {
      await thread.stop();
    }
  });

  it("rejects with the thread's error when the load fails", async () => {
    await expect(WorkerThread.start("./worker-thread-echo", import.meta.url, { op: "load", fail: true })).rejects.toThrow("load failed on purpose");
  });
});
