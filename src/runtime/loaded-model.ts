import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ARTIFACT_FILES, type ArtifactManifest, checkArtifactSizes, describeProblems, readManifest, readTokenizerSpec } from "./artifact/index.js";
import { ChatTemplate, Tokenizer } from "./text/index.js";
import { TextWorker } from "./text-worker/handle.js";
import type { TextSessionOptions } from "./text-worker/protocol.js";

/**
 * A loaded model: everything one artifact folder gives at run time, read by its manifest: the
 * text worker (the thread with the ONNX session and KV pool), the tokenizer and the chat template.
 */
export class LoadedModel {
  private constructor(
    readonly manifest: ArtifactManifest,
    readonly worker: TextWorker,
    readonly tokenizer: Tokenizer,
    readonly template: ChatTemplate | null,
  ) {}

  static async load(artifactDir: string, options: TextSessionOptions = {}): Promise<LoadedModel> {
    const manifest = readManifest(artifactDir);
    // Cheap (no hashing): provisioning verifies hashes; this catches a file truncated or replaced since.
    const problems = checkArtifactSizes(artifactDir, manifest);
    if (problems.length > 0)
      throw new Error(`the artifact ${artifactDir} does not match its manifest: ${describeProblems(problems)}; rebuild it with \`kiln compile --force\``);
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec(artifactDir));
    const templatePath = join(artifactDir, ARTIFACT_FILES.chatTemplate);
    const template = existsSync(templatePath) ? new ChatTemplate(readFileSync(templatePath, "utf8")) : null;
    const worker = await TextWorker.start(artifactDir, options);
    return new LoadedModel(manifest, worker, tokenizer, template);
  }

  async close(): Promise<void> {
    await this.worker.stop();
  }
}
