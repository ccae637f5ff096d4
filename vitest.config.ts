import { resolve } from "node:path";
import { defineConfig } from "vitest/config";

const kilnHome = process.env.KILN_TEST_HOME ?? resolve(".kiln-test");
// Set here so the global setup (which pulls the model) and the test workers agree on the store.
process.env.KILN_HOME = kilnHome;
process.env.KILN_TEST_GGUF ??= resolve(kilnHome, "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The machine has 2 cores and model tests each load real models: run files one at a time.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 900_000,
    // Model tests share one KILN_HOME so pulled weights and compiled artifacts are reused between files.
    env: { KILN_HOME: kilnHome, KILN_TEST_GGUF: process.env.KILN_TEST_GGUF },
    globalSetup: ["test/global-setup.ts"],
  },
});
