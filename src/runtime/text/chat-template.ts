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
  /**
   * The messages already went through {@link ChatTemplate.prepareMessages} (with the same
   * `contentParts`): render them as they are. Default false: render prepares them.
   */
  prepared?: boolean;
}

/**
 * What a template does with tool-call histories, found once per template by rendering probe
 * conversations, as llama.cpp does (minja's chat_template capabilities, vendor/minja/chat-template.hpp).
 */
export interface ToolHistoryCaps {
  /** Renders an assistant message whose content is "" but not one whose content is null (it concatenates content). */
  requiresNonNullContent: boolean;
  /**
   * Renders tool calls only beside a null content, although it cannot print a null content otherwise
   * (DeepSeek-R1 distills' `message['content'] is none` branch): a call message keeps its null.
   */
  callsNeedNullContent: boolean;
  /** Renders an assistant message's `tool_calls` (their arguments appear in the output). */
  supportsToolCalls: boolean;
  /**
   * `function.arguments` reach the template as an object (transformers' and vLLM's convention, for
   * templates that print it with `tojson` or iterate it); false: as the JSON string, for templates
   * that only render the string (they concatenate it).
   */
  objectArguments: boolean;
  /** Renders a `role: "tool"` message's content (probed only when tool calls are supported, as llama.cpp does). */
  supportsToolResponses: boolean;
}

export class ChatTemplateError extends Error {
  /**
   * "render": rendering these messages failed (the template raised, or choked on their shape), so the
   * request is at fault for this template; "parse": the template itself is broken (found at load).
   */
  readonly phase: "parse" | "render";

  constructor(
    message: string,
    /** True when the template itself called raise_exception (bad input, e.g. roles not alternating). */
    readonly raisedByTemplate: boolean,
    options?: { cause?: unknown; phase?: "parse" | "render" },
  ) {
    super(message, options);
    this.name = "ChatTemplateError";
    this.phase = options?.phase ?? "render";
  }
}

/**
 * How a template's model reasons: models that think between `<think>` and `</think>` before they
 * answer (Qwen3, the DeepSeek-R1 distills) have templates that handle those tags (they drop earlier
 * turns' reasoning, or open it in the generation prompt).
 */
export interface TemplateReasoning {
  /** The template reads `enable_thinking` (Qwen3's switch): rendered with it false, the answer comes without reasoning. */
  switchable: boolean;
}

/** Marks errors thrown through the template's raise_exception, to tell them from engine errors. */
class TemplateRaise extends Error {}

/** A chat template compiled once and rendered per request. */
export class ChatTemplate {
  private readonly compiled: Template;
  private readonly inspectsContentParts: boolean;
  private toolCaps: ToolHistoryCaps | undefined;
  private systemRole: boolean | undefined;

  constructor(readonly source: string) {
    try {
      this.compiled = new Template(source);
    } catch (error) {
      throw new ChatTemplateError(`chat template does not parse: ${messageOf(error)}`, false, { cause: error, phase: "parse" });
    }
    this.inspectsContentParts = templateInspectsContentParts(source);
  }

  /** Whether the model reasons in `<think>` tags, read from the template's source; null when it does not. */
  get reasoning(): TemplateReasoning | null {
    return this.source.includes("</think>") ? { switchable: /\benable_thinking\b/.test(this.source) } : null;
  }

  /** How this template takes tool-call histories (probed on first use, then kept). */
  get toolHistoryCaps(): ToolHistoryCaps {
    this.toolCaps ??= probeToolHistoryCaps((messages) => {
      try {
        return this.render(messages, { prepared: true, bosToken: "", eosToken: "", now: () => new Date(0) });
      } catch {
        return "";
      }
    });
    return this.toolCaps;
  }

  /**
   * Whether a leading system message reaches the output (probed on first use, then kept). Gemma 2's and
   * Mixtral's templates raise on one, Phi-3's ignores it; llama.cpp's caps probe finds the same.
   */
  get supportsSystemRole(): boolean {
    if (this.systemRole === undefined) {
      const needle = "<System Needle>";
      try {
        const probe: ChatMessage[] = [
          { role: "system", content: needle },
          { role: "user", content: USER_NEEDLE },
        ];
        this.systemRole = this.render(probe, { prepared: true, bosToken: "", eosToken: "", now: () => new Date(0) }).includes(needle);
      } catch {
        this.systemRole = false;
      }
    }
    return this.systemRole;
  }

  /**
   * The messages as this template takes them: text parts joined for templates that expect strings;
   * a leading system message folded into the next message as "<system>\n<next>" when the template has
   * no system role, or dropped when it is alone (llama.cpp's system_message_not_supported);
   * and, only when the history holds tool calls or tool results, those in the template's shape:
   * - a template that renders `tool_calls` gets them with `function.arguments` as an object parsed
   *   from the JSON string (or the string, for a template that only renders strings), and "" for a
   *   null content when it cannot print null;
   * - a template that does not gets llama.cpp's fallback (minja's polyfills): the assistant's content
   *   becomes the JSON text `{"tool_calls": [{"name", "arguments", "id"}], "content"?}` (indent 2),
   *   and a tool result it does not render becomes a user message whose content is the JSON text
   *   `{"tool_response": {"tool"?, "content", "tool_call_id"?}}`.
   * Messages without tool calls or results come back as they are. Preparing twice changes nothing.
   */
  prepareMessages(messages: readonly ChatMessage[], options: Pick<RenderChatOptions, "contentParts"> = {}): ChatMessage[] {
    const mode = options.contentParts ?? "auto";
    const keepParts = mode === "keep" || (mode === "auto" && this.inspectsContentParts);
    let joined = messages.map((m) => (keepParts ? m : withJoinedText(m)));
    if (joined[0]?.role === "system" && !this.supportsSystemRole) joined = withSystemFolded(joined);
    if (!joined.some((m) => toolCallsOf(m) !== undefined || m.role === "tool")) return joined;
    const caps = this.toolHistoryCaps;
    return joined.map((m) => toolHistoryMessage(m, caps));
  }

  render(messages: readonly ChatMessage[], options: RenderChatOptions = {}): string {
    const variables: Record<string, unknown> = {
      ...(options.bosToken !== undefined ? { bos_token: options.bosToken } : {}),
      ...(options.eosToken !== undefined ? { eos_token: options.eosToken } : {}),
      ...options.extra,
      messages: options.prepared ? messages : this.prepareMessages(messages, options),
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

/** The leading system message's text put before the next message's ("\n" between), or dropped when alone. */
function withSystemFolded(messages: readonly ChatMessage[]): ChatMessage[] {
  const [system, next, ...rest] = messages;
  if (next === undefined) return [];
  const prefix = textOf(system.content) + "\n";
  let content: ChatMessage["content"];
  if (Array.isArray(next.content)) {
    const first = next.content.findIndex((part) => part.type === "text");
    content =
      first === -1
        ? [{ type: "text", text: prefix }, ...next.content]
        : next.content.map((part, i) => (i === first ? { ...part, text: prefix + (part.text ?? "") } : part));
  } else {
    content = prefix + (next.content ?? "");
  }
  return [{ ...next, content }, ...rest];
}

function textOf(content: ChatMessage["content"]): string {
  if (Array.isArray(content))
    return content
      .filter((part) => part.type === "text")
      .map((part) => part.text ?? "")
      .join("\n");
  return content ?? "";
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

// ── Tool-call histories ──────────────────────────────────────────────────────────────────────────

type ToolCall = Record<string, unknown> & { function?: Record<string, unknown> & { arguments?: unknown } };

/** The message's tool calls, when it has any. */
function toolCallsOf(message: ChatMessage): ToolCall[] | undefined {
  const calls = message.tool_calls;
  return Array.isArray(calls) && calls.length > 0 ? (calls as ToolCall[]) : undefined;
}

/** One message of a tool history in the shape `caps` says the template takes (see prepareMessages). */
function toolHistoryMessage(message: ChatMessage, caps: ToolHistoryCaps): ChatMessage {
  let out = message;
  const calls = toolCallsOf(message);
  if (calls !== undefined && caps.supportsToolCalls) {
    out = { ...out, tool_calls: calls.map((call) => withArgumentsShape(call, caps.objectArguments)) };
    if ((out.content ?? null) === null && caps.requiresNonNullContent && !caps.callsNeedNullContent) out.content = "";
  } else if (calls !== undefined) {
    // minja's polyfill_tool_calls: the calls as JSON text in the content.
    const toolCalls = calls
      .filter((call) => call.type === "function" && call.function !== undefined)
      .map((call) => ({
        name: call.function?.name,
        arguments: parseArguments(call.function?.arguments),
        ...(call.id !== undefined ? { id: call.id } : {}),
      }));
    const content = message.content;
    const hasContent = content !== null && content !== undefined && content.length > 0;
    const { tool_calls: _dropped, ...rest } = out;
    out = { ...rest, content: JSON.stringify({ tool_calls: toolCalls, ...(hasContent ? { content } : {}) }, null, 2) };
  }
  if (message.role === "tool" && !caps.supportsToolResponses) {
    // minja's polyfill_tool_responses: a user message holding the result as JSON text.
    const response = {
      ...(message.name !== undefined ? { tool: message.name } : {}),
      content: message.content,
      ...(message.tool_call_id !== undefined ? { tool_call_id: message.tool_call_id } : {}),
    };
    const { name: _dropped, ...rest } = out;
    out = { ...rest, role: "user", content: JSON.stringify({ tool_response: response }, null, 2) };
  }
  return out;
}

/** A tool call with its arguments as an object (parsed from the JSON string) or as the JSON string. */
function withArgumentsShape(call: ToolCall, asObject: boolean): ToolCall {
  const fn = call.function;
  if (fn === null || typeof fn !== "object") return call;
  const args = fn.arguments;
  if (asObject && typeof args === "string") return { ...call, function: { ...fn, arguments: parseArguments(args) } };
  if (!asObject && args !== null && typeof args === "object") return { ...call, function: { ...fn, arguments: JSON.stringify(args) } };
  return call;
}

/** Arguments as JSON values: a string parsed ("" is no arguments, {}); one that is not JSON stays a string, as in llama.cpp. */
function parseArguments(args: unknown): unknown {
  if (typeof args !== "string") return args;
  if (args.trim() === "") return {};
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return args;
  }
}

const USER_NEEDLE = "<User Needle>";
const ARGUMENTS = { argument_needle: "print('Hello, World!')" };

/**
 * Renders the probe conversations of llama.cpp's minja (chat_template's constructor) through
 * `render` (which answers "" when the template throws) and reads the capabilities off the output.
 * Two differences: arguments go as an object whenever the template renders them as one, unless
 * only the string renders cleanly (minja passes the string unless only the object works), since
 * objects are what transformers' templates are written for; and tool calls count as supported
 * when the arguments show at all (minja asks for `"argument_needle":`, which misses a template
 * that prints `key=value` pairs from `arguments.items()`).
 */
function probeToolHistoryCaps(render: (messages: ChatMessage[]) => string): ToolHistoryCaps {
  const user: ChatMessage = { role: "user", content: USER_NEEDLE };
  const withContent = (content: string | null) => {
    const assistant: ChatMessage = { role: "assistant", content };
    return render([user, assistant, user, assistant]);
  };
  const requiresNonNullContent = withContent("").includes(USER_NEEDLE) && !withContent(null).includes(USER_NEEDLE);
  let callContent: string | null = requiresNonNullContent ? "" : null;
  const callsMessage = (calls: ToolCall[]): ChatMessage => ({ role: "assistant", content: callContent, tool_calls: calls });
  const call = (name: string, args: unknown): ToolCall => ({ id: "call_1___", type: "function", function: { arguments: args, name } });
  const result = (id: string, name: string, content: string): ChatMessage => ({ role: "tool", name, content, tool_call_id: id });
  /** Whether the arguments show at all, and whether they show as JSON (or XML) rather than double-escaped. */
  const rendersArguments = (args: unknown) => {
    const out = render([user, callsMessage([call("ipython", args)]), result("call_1___", "ipython", "Hello, World!")]);
    const clean = out.includes("<parameter=argument_needle>") || out.includes('"argument_needle":') || out.includes("'argument_needle':");
    return { seen: out.includes("argument_needle"), clean };
  };
  let asString = rendersArguments(JSON.stringify(ARGUMENTS));
  let asObject = rendersArguments(ARGUMENTS);
  let callsNeedNullContent = false;
  if (!asString.seen && !asObject.seen && requiresNonNullContent) {
    // Some templates print calls only in a branch for a null content: try that before giving up.
    callContent = null;
    asString = rendersArguments(JSON.stringify(ARGUMENTS));
    asObject = rendersArguments(ARGUMENTS);
    callsNeedNullContent = asString.seen || asObject.seen;
    if (!callsNeedNullContent) callContent = "";
  }
  const supportsToolCalls = asString.seen || asObject.seen;
  const objectArguments = asObject.seen && (asObject.clean || !asString.clean);
  let supportsToolResponses = false;
  if (supportsToolCalls) {
    const args = objectArguments ? ARGUMENTS : JSON.stringify(ARGUMENTS);
    supportsToolResponses = render([user, callsMessage([call("test_tool1", args)]), result("call_911_", "test_tool1", "Some response!")]).includes(
      "Some response!",
    );
  }
  return { requiresNonNullContent, callsNeedNullContent, supportsToolCalls, objectArguments, supportsToolResponses };
}

/**
 * Whether a template looks inside message content (tests its type, iterates it, reads part types).
 * Templates that only concatenate `message['content']` need a string.
 */
function templateInspectsContentParts(source: string): boolean {
  return /content'?\]?\s+is\s+(not\s+)?(string|iterable|sequence|mapping)|for\s+\w+\s+in\s+[\w.'"[\]]*content|\[\s*['"]type['"]\s*\]|\.type\s*==/.test(source);
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
