/**
 * The spellings clients use for a catalogue model, resolved to its slug: the source repository id
 * (`Qwen/Qwen2.5-7B-Instruct`, or a GGUF repository it is pulled from), dotted versions
 * (`qwen2.5-7b-instruct`) and Ollama-style tags (`qwen2.5:7b`). Spellings are compared by their
 * letters and digits only, so `qwen2.5-7b-instruct`, `Qwen2.5-7B-Instruct` and `qwen-2-5-7b-instruct`
 * are one name; a spelling that fits two models resolves to neither.
 */
import { MODELS } from "./models.js";
import type { ModelEntry } from "./types.js";

/** Letters and digits only, lower case: the part of a name that survives every spelling. */
function key(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]/g, "");
}

/** The part after the owner: `Qwen/Qwen2.5-7B-Instruct` -> `Qwen2.5-7B-Instruct`. */
function repoName(repo: string): string {
  return repo.slice(repo.lastIndexOf("/") + 1);
}

/** Names each entry is known by besides its slug: its upstream repository and its hub sources, with and without the owner. */
function namesOf(entry: ModelEntry): string[] {
  const repos = [entry.upstream, ...entry.sources.flatMap((s) => (s.type === "hub" ? [s.repo] : []))];
  const names = [entry.slug];
  for (const repo of repos) {
    names.push(repo, repoName(repo));
    // GGUF repositories are named after the model with a suffix: `Qwen2.5-7B-Instruct-GGUF`.
    const bare = repoName(repo).replace(/[-_.]?gguf$/i, "");
    names.push(bare);
    // Instruction-tuned Gemma is `-it` upstream and `-instruct` in slugs.
    if (/-it$/i.test(bare)) names.push(`${bare.slice(0, -3)}-instruct`);
  }
  return names;
}

/** Spelling key -> slug; keys that two models share are left out (ambiguous). */
const INDEX: ReadonlyMap<string, string> = (() => {
  const index = new Map<string, string | null>();
  for (const entry of MODELS) {
    for (const name of new Set(namesOf(entry).map(key))) {
      const seen = index.get(name);
      index.set(name, seen === undefined || seen === entry.slug ? entry.slug : null);
    }
  }
  // A model's own slug always wins over another model's alias.
  for (const entry of MODELS) index.set(key(entry.slug), entry.slug);
  return new Map([...index].filter((e): e is [string, string] => e[1] !== null));
})();

/** Quantization and format suffixes of Ollama tags (`7b-instruct-q4_K_M`, `8b-fp16`): they name a build, not a model. */
const TAG_BUILD = /-(q\d[a-z0-9_]*|iq\d[a-z0-9_]*|fp16|f16|bf16|fp32|gguf)(-.*)?$/i;

/**
 * The slug `id` names, or undefined when it names no catalogue model (or fits more than one).
 * A slug is its own answer.
 */
export function resolveModelId(id: string): string | undefined {
  const direct = INDEX.get(key(id.replace(/^(https?:\/\/)?(hf\.co|huggingface\.co)\//i, "")));
  if (direct !== undefined) return direct;
  const colon = id.lastIndexOf(":");
  if (colon <= 0) return undefined;
  // Ollama: `name:tag`, where the tag is a size (`7b`), `latest`, or a size with a variant and a build.
  const name = id.slice(0, colon);
  const tag = id.slice(colon + 1).replace(TAG_BUILD, "");
  const stems = tag === "" || tag.toLowerCase() === "latest" ? [name] : [`${name}${tag}`];
  for (const stem of stems) {
    // Ollama's plain tags are the instruction-tuned builds.
    for (const candidate of [stem, `${stem}-instruct`, `${stem}-it`]) {
      const slug = INDEX.get(key(candidate));
      if (slug !== undefined) return slug;
    }
  }
  return undefined;
}
