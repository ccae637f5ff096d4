import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ARTIFACT_FILES, type ArtifactManifest, readManifest, readTokenizerSpec } from "./artifact.js";
import { ModelWorker } from "./model-worker.js";
import type { TextModelOptions } from "./text-model.js";
import { type ChatMessage, ChatTemplate, Tokenizer } from "./text/index.js";

/**
 * A compiled text model ready to serve: its worker thread (ONNX session + KV pool), tokenizer and
 * chat template, all read from one artifact folder.
 */
export class TextRuntime {
  private constructor(
    readonly manifest: ArtifactManifest,
    readonly worker: ModelWorker,
    readonly tokenizer: Tokenizer,
    readonly template: ChatTemplate | null,
  ) {}

  static async load(artifactDir: string, options: TextModelOptions = {}): Promise<TextRuntime> {
    const manifest = readManifest(artifactDir);
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec(artifactDir));
    const templatePath = join(artifactDir, ARTIFACT_FILES.chatTemplate);
    const template = existsSync(templatePath) ? new ChatTemplate(readFileSync(templatePath, "utf8")) : null;
    const worker = await ModelWorker.start(artifactDir, options);
    return new TextRuntime(manifest, worker, tokenizer, template);
  }

  /** Renders messages through the model's own chat template, ready for the assistant's turn. */
  renderChat(messages: readonly ChatMessage[]): string {
    if (!this.template) throw new Error(`${this.manifest.slug} has no chat template`);
    const text = (id: number | null) => (id === null ? undefined : this.tokenizer.tokenText(id));
    return this.template.render(messages, { addGenerationPrompt: true, bosToken: text(this.tokenizer.bosId), eosToken: text(this.tokenizer.eosId) });
  }

  /** Tokens of a rendered chat prompt: special-token text is parsed, BOS added only if the model asks for it and the text lacks it. */
  encodePrompt(text: string): number[] {
    const ids = this.tokenizer.encode(text, { addSpecial: false, parseSpecial: true });
    const bos = this.tokenizer.bosId;
    if (this.tokenizer.addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
    return ids;
  }

  async close(): Promise<void> {
    await this.worker.stop();
  }
}
