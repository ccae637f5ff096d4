import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The machine has 2 cores and model tests each load real models: run files one at a time.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 600_000,
    globalSetup: ["test/global-setup.ts"],
  },
});
