/**
 * Prompt rendering: chat messages through the model's own chat template, and text to prompt
 * tokens (BOS added when the model asks for it and the text lacks it).
 *
 * Special-token text written by a client (`<|im_start|>` typed in a message or a completion prompt)
 * is text, never a control token, unless the server trusts its clients with them
 * (`specialTokens: "parse"`, llama.cpp's and vLLM's behaviour). In a chat only the template's own
 * scaffolding, and the BOS/EOS texts it is given, become control tokens: before rendering, every
 * control-token text inside the messages is swapped for a stand-in that no template changes (two
 * private-use characters around an index); the rendered prompt is tokenized with special tokens
 * parsed, and each stand-in is put back as plain text before pre-tokenization, so it joins its
 * neighbours exactly as it would have. Messages without such text render and tokenize exactly as
 * before, and templates that transform content (`| trim`, slicing) keep working on it.
 */
import { ChatTemplateError, type ChatTemplate, type Literals, type Tokenizer } from "../../runtime/text/index.js";
import { templateRendersTools, type ToolDialect, type ToolFunction, type WireTool } from "../tools/index.js";
import type { ChatMessage } from "../types.js";

/** The tools a chat offers, and the dialect that tells the model about them when its template cannot. */
export interface ToolPrompt {
  tools: readonly ToolFunction[];
  dialect: ToolDialect;
}

/** How client text is tokenized: special-token text kept as "text" (default), or "parse"d into control tokens. */
export type SpecialTokenMode = "text" | "parse";

/**
 * Renders messages through the chat template, ready for the assistant's turn unless
 * `generationPrompt` is false. `prepared`: the messages already went through
 * `template.prepareMessages` (tool histories in the template's shape).
 */
export function renderChat(
  template: ChatTemplate,
  tokenizer: Tokenizer,
  messages: readonly ChatMessage[],
  prepared = false,
  tools?: readonly WireTool[],
  variables?: Readonly<Record<string, unknown>>,
  generationPrompt = true,
): string {
  const text = (id: number | null) => (id === null ? undefined : tokenizer.tokenText(id));
  return template.render(messages, {
    addGenerationPrompt: generationPrompt,
    bosToken: text(tokenizer.bosId),
    eosToken: text(tokenizer.eosId),
    prepared,
    ...(tools ? { tools: [...tools] } : {}),
    ...(variables ? { extra: { ...variables } } : {}),
  });
}

/**
 * Where a chat's prompt ends: "assistant-turn" (the default), with the opening of the assistant's
 * turn, for a new answer; "after-messages", right after the last message; "inside-last-message",
 * inside the last message (an assistant's), whose text the answer then continues (vLLM's
 * `continue_final_message`, llama.cpp's assistant prefill).
 */
export type ChatEnding = "assistant-turn" | "after-messages" | "inside-last-message";

/** How a chat is rendered into a prompt, beyond its messages. */
export interface ChatPromptOptions {
  /** The tools the chat offers, and the dialect that tells the model about them when the template cannot. */
  tools?: ToolPrompt;
  /** More variables for the template (`chat_template_kwargs`). */
  variables?: Readonly<Record<string, unknown>>;
  /** Default "assistant-turn". */
  ending?: ChatEnding;
}

/**
 * Tokens of a chat: the messages rendered through the template, client text kept as text unless
 * `mode` is "parse". Tool histories are put in the template's shape before escaping (arguments
 * parsed from their JSON strings, or turned into JSON text for templates without tool support),
 * so that control-token text a client wrote inside arguments, even as a JSON escape, stays text.
 */
export function chatPromptIds(
  template: ChatTemplate,
  tokenizer: Tokenizer,
  messages: readonly ChatMessage[],
  mode: SpecialTokenMode = "text",
  options: ChatPromptOptions = {},
): number[] {
  const { tools, variables } = options;
  const prepared = template.prepareMessages(messages);
  const literals = mode === "parse" ? undefined : new LiteralEscaper(tokenizer, template.source);
  let escaped = literals ? prepared.map((m) => literals.escapeMessage(m)) : prepared;
  let wireTools = tools?.tools.map(wireTool);
  if (literals && wireTools) wireTools = literals.escapeValue(wireTools) as WireTool[];
  // Client-given template variables are client text too.
  const vars = literals && variables ? (literals.escapeValue(variables) as Record<string, unknown>) : variables;
  const ending = options.ending ?? "assistant-turn";
  // The text a continued message ends with; one without text is continued from the turn's opening.
  let continued = ending === "inside-last-message" ? lastText(escaped[escaped.length - 1]) : "";
  if (ending === "inside-last-message" && continued === "") escaped = escaped.slice(0, -1);
  const generationPrompt = ending === "assistant-turn" || (ending === "inside-last-message" && continued === "");
  let rendered: string;
  if (!tools || !wireTools || templateRendersTools(template.source)) {
    rendered = renderChat(template, tokenizer, escaped, true, wireTools, vars, generationPrompt);
  } else {
    // The dialect's own words, added after escaping: its markup is the server's, not the client's.
    rendered = renderChat(template, tokenizer, withSystemText(escaped, tools.dialect.instructions(wireTools)), true, undefined, vars, generationPrompt);
  }
  if (continued !== "") rendered = openAfter(rendered, continued);
  if (!literals) return encodePrompt(tokenizer, rendered, "parse");
  return withBos(tokenizer, tokenizer.encode(rendered, { parseSpecial: true, literals: literals.used() }));
}

/** The text a message ends with: its content, or its last text part ("" for none). */
function lastText(message: ChatMessage | undefined): string {
  const content = message?.content;
  if (typeof content === "string") return content;
  const parts = (content ?? []).filter((p) => typeof p.text === "string" && p.text !== "");
  return parts.length === 0 ? "" : parts[parts.length - 1].text!;
}

/**
 * The rendered chat cut right after the last message's text, leaving that message open. A template
 * may trim it (Llama 3's does), so the trimmed text is looked for too.
 */
function openAfter(rendered: string, text: string): string {
  for (const candidate of [text, text.trimEnd(), text.trim()]) {
    const at = candidate === "" ? -1 : rendered.lastIndexOf(candidate);
    if (at >= 0) return rendered.slice(0, at + candidate.length);
  }
  throw new ChatTemplateError(
    "The chat template changes the last message's text as it renders it, so kiln cannot continue that message: send it without continue_final_message.",
    false,
    { phase: "render" },
  );
}

/** The reference API's shape of a tool definition, which chat templates are written for. */
function wireTool(fn: ToolFunction): WireTool {
  return { type: "function", function: { name: fn.name, ...(fn.description !== undefined ? { description: fn.description } : {}), parameters: fn.parameters } };
}

/** `text` as the system prompt: after the conversation's own system text, or as a new first message. */
function withSystemText(messages: readonly ChatMessage[], text: string): ChatMessage[] {
  const first = messages[0];
  if (first?.role === "system") {
    const own = typeof first.content === "string" ? first.content : (first.content ?? []).map((p) => p.text ?? "").join("\n");
    return [{ ...first, content: own === "" ? text : `${own}\n\n${text}` }, ...messages.slice(1)];
  }
  return [{ role: "system", content: text }, ...messages];
}

/** Tokens of a prompt text; special-token text stays text unless `mode` is "parse". `bos`: the BOS the model wants leads (default true). */
export function encodePrompt(tokenizer: Tokenizer, text: string, mode: SpecialTokenMode = "text", bos = true): number[] {
  const ids = tokenizer.encode(text, { addSpecial: false, parseSpecial: mode === "parse" });
  return bos ? withBos(tokenizer, ids) : ids;
}

/**
 * A fill-in-the-middle prompt, as llama.cpp's server builds one for `/infill` and node-llama-cpp for
 * its infill completions (prefix-suffix-middle order): the BOS the model wants, the prefix marker,
 * `prefix` (token ids, no BOS), the suffix marker, `suffix`'s tokens, the middle marker, after which
 * the model writes what goes between. Null when the vocabulary has no such markers.
 */
export function infillPrompt(tokenizer: Tokenizer, prefix: readonly number[], suffix: string, mode: SpecialTokenMode = "text"): number[] | null {
  const fim = tokenizer.fim;
  if (fim === null) return null;
  const ids = [fim.prefix, ...prefix, fim.suffix, ...encodePrompt(tokenizer, suffix, mode, false), fim.middle];
  return withBos(tokenizer, ids);
}

/** A file given as context to an infill (llama.cpp's `input_extra`). */
export interface InfillFile {
  filename: string;
  text: string;
}

/** What llama.cpp's `/infill` takes: the text before and after the cursor, more text after the prefix, and files as context. */
export interface InfillRequest {
  prefix: string;
  suffix: string;
  /** Text put after the prefix (llama.cpp's `prompt` on `/infill`). */
  prompt: string;
  extra: readonly InfillFile[];
}

/** Most tokens of the prefix and the suffix kept, as llama.cpp keeps them with its default batch of 2048: three quarters, one quarter. */
const INFILL_BATCH = 2048;

/**
 * llama.cpp's `/infill` prompt (format_prompt_infill): the files of `extra` as a repository-level
 * context (`<repo> myproject\n`, each file as `<file_sep> filename\n text`, then `<file_sep>
 * filename\n`, where the vocabulary has those markers; otherwise each file after a `--- snippet ---`
 * line), then the BOS the model wants, `<prefix> prefix prompt <suffix> suffix <middle>`. The prefix
 * keeps its last 1,536 tokens, the suffix its first 510 less the prompt's, and the context its last
 * tokens that fit `room` ({@link infillContextRoom}), as llama.cpp cuts them. Null when the vocabulary has no fill-in-the-middle markers.
 */
export function repositoryInfillPrompt(tokenizer: Tokenizer, request: InfillRequest, room: number, mode: SpecialTokenMode = "text"): number[] | null {
  const fim = tokenizer.fim;
  if (fim === null) return null;
  const tokens = (text: string) => encodePrompt(tokenizer, text, mode, false);
  const extra: number[] = [];
  if (fim.repo !== null) extra.push(fim.repo, ...tokens("myproject\n"));
  for (const file of request.extra) {
    if (fim.fileSeparator !== null) extra.push(fim.fileSeparator, ...tokens(`${file.filename}\n`));
    else extra.push(...tokens("\n\n--- snippet ---\n\n"));
    extra.push(...tokens(file.text));
  }
  if (fim.fileSeparator !== null) extra.push(fim.fileSeparator, ...tokens("filename\n"));
  const promptIds = tokens(request.prompt);
  const prefix = tokens(request.prefix).slice(-Math.floor((3 * INFILL_BATCH) / 4));
  const suffix = tokens(request.suffix).slice(0, Math.max(0, INFILL_BATCH / 4 - (2 + promptIds.length)));
  const context = extra.slice(extra.length - Math.min(extra.length, Math.max(0, room)));
  return [...context, ...withBos(tokenizer, [fim.prefix, ...prefix, ...promptIds]), fim.suffix, ...suffix, fim.middle];
}

/** Tokens llama.cpp's `/infill` leaves its file context: the context less a batch and twice its server's default budget (-1). */
export function infillContextRoom(contextLength: number): number {
  return contextLength - INFILL_BATCH + 2;
}

function withBos(tokenizer: Tokenizer, ids: number[]): number[] {
  const bos = tokenizer.bosId;
  if (tokenizer.addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
  return ids;
}

/** First and last private-use characters (U+E000..U+F8FF): never produced by the templates' own text. */
const PRIVATE_USE_FIRST = 0xe000;
const PRIVATE_USE_LAST = 0xf8ff;

/**
 * Swaps control-token texts (and the stand-in's own opening character) in client strings for
 * stand-ins `open + index + close`, remembering the text of each.
 */
class LiteralEscaper {
  private readonly open: string;
  private readonly close: string;
  private readonly texts: string[] = [];
  /** Candidate texts by first character, longest first (the tokenizer's order). */
  private readonly byFirst: Map<string, string[]>;

  constructor(tokenizer: Tokenizer, templateSource: string) {
    ({ open: this.open, close: this.close, byFirst: this.byFirst } = escapeTable(tokenizer, templateSource));
  }

  /** The stand-ins used so far, for the tokenizer; undefined when none was needed. */
  used(): Literals | undefined {
    return this.texts.length === 0 ? undefined : { open: this.open, close: this.close, texts: this.texts };
  }

  /** Every string a client wrote in the message escaped (the role is the API's own, checked against a list). */
  escapeMessage(message: ChatMessage): ChatMessage {
    const out: ChatMessage = { ...message };
    for (const [key, value] of Object.entries(message)) if (key !== "role") out[key] = this.escapeValue(value);
    return out;
  }

  escapeValue(value: unknown): unknown {
    if (typeof value === "string") return this.escape(value);
    if (Array.isArray(value)) return value.map((v) => this.escapeValue(v));
    if (value !== null && typeof value === "object") {
      // Keys too: parsed tool-call arguments are client objects a template may print whole (tojson).
      return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [this.escape(k), this.escapeValue(v)]));
    }
    return value;
  }

  private escape(text: string): string {
    let out = "";
    let from = 0;
    for (let at = 0; at < text.length; ) {
      const match = this.byFirst.get(text[at])?.find((candidate) => text.startsWith(candidate, at));
      if (match === undefined) {
        at++;
        continue;
      }
      out += text.slice(from, at) + this.open + String(this.texts.push(match) - 1) + this.close;
      at += match.length;
      from = at;
    }
    return from === 0 ? text : out + text.slice(from);
  }
}

interface EscapeTable {
  open: string;
  close: string;
  byFirst: Map<string, string[]>;
}

/** Per tokenizer and template: built once, it is the same for every request. */
const escapeTables = new WeakMap<Tokenizer, Map<string, EscapeTable>>();

function escapeTable(tokenizer: Tokenizer, templateSource: string): EscapeTable {
  const perTemplate = escapeTables.get(tokenizer) ?? new Map<string, EscapeTable>();
  escapeTables.set(tokenizer, perTemplate);
  let table = perTemplate.get(templateSource);
  if (table === undefined) {
    const specials = tokenizer.literalTexts;
    // Stand-in characters that neither the template nor any special-token text contains.
    const taken = (c: string) => templateSource.includes(c) || specials.some((t) => t.includes(c));
    const free: string[] = [];
    for (let code = PRIVATE_USE_FIRST; code <= PRIVATE_USE_LAST && free.length < 2; code++) {
      const c = String.fromCharCode(code);
      if (!taken(c)) free.push(c);
    }
    const [open, close] = free;
    table = { open, close, byFirst: firstCharIndex([...specials, open]) };
    perTemplate.set(templateSource, table);
  }
  return table;
}

function firstCharIndex(texts: readonly string[]): Map<string, string[]> {
  const index = new Map<string, string[]>();
  for (const text of [...texts].sort((a, b) => b.length - a.length)) {
    const list = index.get(text[0]) ?? [];
    list.push(text);
    index.set(text[0], list);
  }
  return index;
}
