/** `--model` arguments that name GGUF files on this machine rather than catalogue slugs. */
import { hasModel, UnknownModelError } from "../catalogue/catalogue.js";
import { checkLocalGguf, isLocalModelPath, type LocalGguf } from "../provision/index.js";
import { UsageError } from "./options.js";

/** `--model` arguments told apart: catalogue slugs and local files, each once. */
export interface ModelArgs {
  slugs: string[];
  files: string[];
}

/** Splits `--model` arguments into catalogue slugs and local files; a usage error names one that is neither. */
export function splitModelArgs(args: readonly string[]): ModelArgs {
  const slugs: string[] = [];
  const files: string[] = [];
  for (const arg of args) {
    if (isLocalModelPath(arg)) files.push(arg);
    else if (hasModel(arg)) slugs.push(arg);
    else throw new UsageError(new UnknownModelError(arg).message);
  }
  return { slugs: [...new Set(slugs)], files: [...new Set(files)] };
}

/**
 * Checks each local file (exists, is a GGUF file of an architecture kiln compiles) before anything
 * loads; throws `LocalModelError` for the first that is not, and a usage error when two files would
 * serve under one slug.
 */
export async function checkLocalModels(files: readonly string[]): Promise<LocalGguf[]> {
  const locals: LocalGguf[] = [];
  for (const file of files) {
    const local = await checkLocalGguf(file);
    const twin = locals.find((l) => l.slug === local.slug);
    if (twin && twin.path !== local.path) throw new UsageError(`${twin.path} and ${local.path} would both serve as ${local.slug}: rename one of them`);
    if (!twin) locals.push(local);
  }
  return locals;
}
