import { checkArtifactSizes, describeProblems, readSpeechManifest, readTokenizerSpec, type SpeechArtifactManifest } from "./artifact/index.js";
import { Tokenizer } from "./text/index.js";
import type { SpeechSessionOptions } from "./speech-worker/protocol.js";
import { SpeechWorker } from "./speech-worker/handle.js";

/** A loaded speech model: its manifest, its tokenizer, and the worker thread that runs its two graphs. */
export class LoadedSpeechModel {
  private constructor(
    readonly manifest: SpeechArtifactManifest,
    readonly worker: SpeechWorker,
    readonly tokenizer: Tokenizer,
  ) {}

  static async load(artifactDir: string, options: SpeechSessionOptions = {}): Promise<LoadedSpeechModel> {
    const manifest = readSpeechManifest(artifactDir);
    const problems = checkArtifactSizes(artifactDir, manifest);
    if (problems.length > 0)
      throw new Error(`the artifact ${artifactDir} does not match its manifest: ${describeProblems(problems)}; rebuild it with \`kiln compile --force\``);
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec(artifactDir));
    const worker = await SpeechWorker.start(artifactDir, options);
    return new LoadedSpeechModel(manifest, worker, tokenizer);
  }

  async close(): Promise<void> {
    await this.worker.stop();
  }
}
