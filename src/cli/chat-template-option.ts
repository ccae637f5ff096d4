/** `--chat-template-file`, as llama.cpp's server and CLI take it: a chat template instead of the model's own. */
import { option, UsageError } from "./options.js";

/** The option's declaration; `scope` says which models it applies to. */
export function chatTemplateFileOption(scope: string) {
  return option.string({
    value: "<file>",
    description: `a Jinja chat template to render chats with instead of the model's own, as llama.cpp's --chat-template-file (${scope})`,
  });
}

/** `--chat-template-file`'s template, read and parsed once, so that a missing file or a bad template is a usage error before anything loads. */
export async function chatTemplateFrom(file: string | undefined): Promise<string | undefined> {
  if (file === undefined) return undefined;
  const { readFileSync } = await import("node:fs");
  const { ChatTemplate } = await import("../runtime/text/index.js");
  let source: string;
  try {
    source = readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`--chat-template-file ${file}: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (err as Error).message}`);
  }
  try {
    new ChatTemplate(source);
  } catch (err) {
    throw new UsageError(`--chat-template-file ${file}: ${(err as Error).message}`);
  }
  return source;
}
