import { resolve } from "node:path";
import { defineConfig } from "vitest/config";

const kilnHome = process.env.KILN_TEST_HOME ?? resolve(".kiln-test");
// Set here so the global setup (which pulls the models) and the test workers agree on the store.
process.env.KILN_HOME = kilnHome;
process.env.KILN_TEST_GGUF ??= resolve(kilnHome, "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");

/** Tests that start real servers (Postgres, Redis, nginx): named `*.integration.test.ts`, beside the code they test. */
const INTEGRATION = "test/**/*.integration.test.ts";

/**
 * Three projects, run one after the other (`groupOrder`):
 * - `unit`: `test/unit`, no model and no server, files in parallel (`npm run test:unit`);
 * - `model`: `test/model`, the real models, one file at a time because each loads real models on a
 *   2-core machine;
 * - `integration`: the tests that start Postgres, Redis or nginx (some with a real model too), one
 *   file at a time.
 * The last two pull the embedded models once into the shared test home (a no-op when pulled).
 */
export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 900_000,
    // Model tests share one KILN_HOME so pulled weights and compiled artifacts are reused between files.
    env: { KILN_HOME: kilnHome, KILN_TEST_GGUF: process.env.KILN_TEST_GGUF },
    projects: [
      {
        extends: true,
        test: { name: "unit", include: ["test/unit/**/*.test.ts"], exclude: [INTEGRATION], sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: {
          name: "integration",
          include: [INTEGRATION],
          fileParallelism: false,
          globalSetup: ["test/global-setup.ts"],
          sequence: { groupOrder: 2 },
        },
      },
      {
        extends: true,
        test: {
          name: "model",
          include: ["test/model/**/*.test.ts"],
          exclude: [INTEGRATION],
          fileParallelism: false,
          globalSetup: ["test/global-setup.ts"],
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
