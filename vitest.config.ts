import { resolve } from "node:path";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The machine has 2 cores and model tests each load real models: run files one at a time.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 900_000,
    // Model tests share one KILN_HOME so pulled weights and compiled artifacts are reused between files.
    env: { KILN_HOME: process.env.KILN_TEST_HOME ?? resolve(".kiln-test") },
  },
});
