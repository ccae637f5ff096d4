import { Environment, Interpreter, Template } from "@huggingface/jinja";

/** One content part of an OpenAI-style message; only "text" parts carry text a template can print. */
export interface ContentPart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export interface ChatMessage {
  role: string;
  content: string | ContentPart[] | null;
  /** Anything else the template may read (tool_calls, name, tool_call_id, reasoning_content...). */
  [key: string]: unknown;
}

export interface RenderChatOptions {
  /** End with the header that starts the assistant's turn. */
  addGenerationPrompt?: boolean;
  bosToken?: string;
  eosToken?: string;
  /** Tool definitions; passed as `tools` only when given, as llama.cpp and HF do. */
  tools?: unknown[];
  /** More template variables (HF's apply_chat_template kwargs, llama.cpp's chat_template_kwargs). */
  extra?: Record<string, unknown>;
  /**
   * How array content reaches the template. "join": text parts joined with "\n" into a string (what
   * llama.cpp does for templates that expect strings); "keep": passed as is; "auto" (default): keep
   * when the template visibly inspects content parts, otherwise join.
   */
  contentParts?: "auto" | "join" | "keep";
  /** Clock for strftime_now; tests pin it. */
  now?: () => Date;
}

export class ChatTemplateError extends Error {
  constructor(
    message: string,
    /** True when the template itself called raise_exception (bad input, e.g. roles not alternating). */
    readonly raisedByTemplate: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "ChatTemplateError";
  }
}

/** Marks errors thrown through the template's raise_exception, to tell them from engine errors. */
class TemplateRaise extends Error {}

/** A chat template compiled once and rendered per request. */
export class ChatTemplate {
  private readonly compiled: Template;
  private readonly inspectsContentParts: boolean;

  constructor(readonly source: string) {
    try {
      this.compiled = new Template(source);
    } catch (error) {
      throw new ChatTemplateError(`chat template does not parse: ${messageOf(error)}`, false, { cause: error });
    }
    this.inspectsContentParts = templateInspectsContentParts(source);
  }

  render(messages: readonly ChatMessage[], options: RenderChatOptions = {}): string {
    const mode = options.contentParts ?? "auto";
    const keepParts = mode === "keep" || (mode === "auto" && this.inspectsContentParts);
    const variables: Record<string, unknown> = {
      ...(options.bosToken !== undefined ? { bos_token: options.bosToken } : {}),
      ...(options.eosToken !== undefined ? { eos_token: options.eosToken } : {}),
      ...options.extra,
      messages: messages.map((m) => (keepParts ? m : withJoinedText(m))),
      add_generation_prompt: options.addGenerationPrompt ?? false,
      ...(options.tools !== undefined ? { tools: options.tools } : {}),
    };
    try {
      const env = templateGlobals(options.now ?? (() => new Date()));
      for (const [name, value] of Object.entries(variables)) env.set(name, value);
      const result = new Interpreter(env).run(this.compiled.parsed);
      return String(result.value);
    } catch (error) {
      if (error instanceof TemplateRaise) {
        throw new ChatTemplateError(`chat template rejected the messages: ${error.message}`, true, { cause: error });
      }
      throw new ChatTemplateError(`chat template failed to render: ${messageOf(error)}`, false, { cause: error });
    }
  }
}

/**
 * The globals @huggingface/jinja's Template.render sets up, with our own raise_exception (so a
 * template's own error can be told apart from an engine failure) and strftime_now (a Python-like one
 * with an injectable clock). Template.render cannot be used: it refuses to redefine its globals.
 */
function templateGlobals(now: () => Date): Environment {
  const env = new Environment();
  const constants: Record<string, unknown> = { false: false, true: true, none: null, False: false, True: true, None: null };
  for (const [name, value] of Object.entries(constants)) env.set(name, value);
  env.set("range", pythonRange);
  env.set("raise_exception", (message: unknown) => {
    throw new TemplateRaise(String(message));
  });
  env.set("strftime_now", (format: unknown) => strftime(now(), String(format)));
  return env;
}

function pythonRange(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error("range() arg 3 must not be zero");
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/** Renders `messages` with a Jinja chat template, giving it the variables HF's apply_chat_template gives. */
export function renderChat(template: string, messages: readonly ChatMessage[], options: RenderChatOptions = {}): string {
  return new ChatTemplate(template).render(messages, options);
}

/** Text parts joined with "\n", other parts dropped: llama.cpp's concat_content_parts. */
function withJoinedText(message: ChatMessage): ChatMessage {
  if (!Array.isArray(message.content)) return message;
  const text = message.content
    .filter((part) => part.type === "text")
    .map((part) => part.text ?? "")
    .join("\n");
  return { ...message, content: text };
}

/**
 * Whether a template looks inside message content (tests its type, iterates it, reads part types).
 * Templates that only concatenate `message['content']` need a string.
 */
function templateInspectsContentParts(source: string): boolean {
  return /content'?\]?\s+is\s+(not\s+)?(string|iterable|sequence|mapping)|for\s+\w+\s+in\s+[\w.'"[\]]*content|\[\s*['"]type['"]\s*\]|\.type\s*==/.test(
    source,
  );
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];

/**
 * Python's datetime.strftime for the directives chat templates use (Llama 3.x prints "%d %b %Y"),
 * in the C locale, local time. "%-d" style (no padding) works as on Linux.
 */
export function strftime(date: Date, format: string): string {
  return format.replace(/%(-?)([aAbBdeHIjmMpSyYZz%])/g, (_, noPad: string, directive: string) => {
    const pad = (n: number, width = 2) => (noPad ? String(n) : String(n).padStart(width, "0"));
    switch (directive) {
      case "a":
        return DAYS[date.getDay()].slice(0, 3);
      case "A":
        return DAYS[date.getDay()];
      case "b":
        return MONTHS[date.getMonth()].slice(0, 3);
      case "B":
        return MONTHS[date.getMonth()];
      case "d":
        return pad(date.getDate());
      case "e":
        return String(date.getDate()).padStart(noPad ? 0 : 2, " ");
      case "H":
        return pad(date.getHours());
      case "I":
        return pad(date.getHours() % 12 || 12);
      case "j":
        return pad(dayOfYear(date), 3);
      case "m":
        return pad(date.getMonth() + 1);
      case "M":
        return pad(date.getMinutes());
      case "p":
        return date.getHours() < 12 ? "AM" : "PM";
      case "S":
        return pad(date.getSeconds());
      case "y":
        return pad(date.getFullYear() % 100);
      case "Y":
        return String(date.getFullYear());
      case "Z":
        return "";
      case "z":
        return "";
      default:
        return "%";
    }
  });
}

function dayOfYear(date: Date): number {
  const start = new Date(date.getFullYear(), 0, 1);
  return Math.round((new Date(date.getFullYear(), date.getMonth(), date.getDate()).getTime() - start.getTime()) / 86_400_000) + 1;
}
