/**
 * Command-line options declared once. A command lists its options as an object of
 * {@link OptionSpec}s (built with {@link option}); from that one declaration node:util's parseArgs
 * parses the argv (strict), this module checks and converts each value with a one-line error that
 * names the option, types the result, and writes the command's --help text.
 *
 * An option's long name is its key in kebab case: `maxRunning` is `--max-running`.
 */
import { parseArgs } from "node:util";

/** A mistake on the command line: the command prints the message and its help, and exits with 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** One option of a command. */
export interface OptionSpec<T = unknown> {
  /** What the value is: text (optionally one of `choices`), a whole number, any number, or a flag that takes no value. */
  type: "string" | "integer" | "number" | "boolean";
  /** One line for the help: what the option means, with its unit when it has one. Wrapped when long. */
  description: string;
  /** One-letter alias, without the dash: "m" for `-m`. */
  short?: string;
  /** How the help shows the value: "<slug>", "MiB". Default: "N" for numbers, the choices joined by "|", else "<value>". */
  value?: string;
  /** May be given more than once; the value is then every occurrence, in order (an empty list when absent). */
  multiple?: boolean;
  /** The command cannot run without it: absent is a usage error, and the usage line shows it. */
  required?: boolean;
  /** The value when the option is absent (and `env` is unset or empty); shown in the help. */
  default?: unknown;
  /** Environment variable whose value stands in for an absent option, before `default`; checked like a given value. */
  env?: string;
  /** Smallest accepted value of an integer or number option, inclusive. */
  min?: number;
  /** Largest accepted value of an integer or number option, inclusive. */
  max?: number;
  /** The only values a string option accepts. */
  choices?: readonly string[];
  /** Never set: carries the parsed value's type to {@link OptionValues}. */
  readonly parsedType?: T;
}

export type OptionSpecs = Record<string, OptionSpec>;

/** The parsed, checked values of a command's options, keyed like its declaration. */
export type OptionValues<O extends OptionSpecs> = { [K in keyof O]: O[K] extends OptionSpec<infer T> ? T : never };

export interface CommandLine<O extends OptionSpecs> {
  options: OptionValues<O>;
  positionals: string[];
  /**
   * The options the operator set (on the command line, or through their environment variable), as
   * opposed to those at their declared default: a setting recorded elsewhere (a promoted artifact's)
   * may stand in for a default, never for a value the operator chose.
   */
  given: ReadonlySet<keyof O>;
}

type Common = Pick<OptionSpec, "description" | "short" | "value" | "env">;
type Occurrence<V> = { multiple?: boolean; required?: boolean; default?: V };
/** A repeatable option parses to a list; one that is required or has a default is always set. */
type Parsed<V, S> = S extends { multiple: true } ? V[] : S extends { default: V } | { required: true } ? V : V | undefined;

/** Builders that give each declaration the type of its parsed value. */
export const option = {
  string<const S extends Common & Occurrence<string>>(spec: S): OptionSpec<Parsed<string, S>> {
    return { type: "string", ...spec };
  },
  choice<const C extends string, const S extends Common & Occurrence<NoInfer<C>>>(choices: readonly C[], spec: S): OptionSpec<Parsed<C, S>> {
    return { type: "string", choices, ...spec };
  },
  integer<const S extends Common & Occurrence<number> & { min?: number; max?: number }>(spec: S): OptionSpec<Parsed<number, S>> {
    return { type: "integer", ...spec };
  },
  number<const S extends Common & Occurrence<number> & { min?: number; max?: number }>(spec: S): OptionSpec<Parsed<number, S>> {
    return { type: "number", ...spec };
  },
  flag(spec: Pick<OptionSpec, "description" | "short">): OptionSpec<boolean> {
    return { type: "boolean", ...spec };
  },
};

/** Every command has it; {@link wantsHelp} parses it. */
const HELP_OPTION: OptionSpec = { type: "boolean", short: "h", description: "show this help" };

/** `maxRunning` → `max-running`. */
function longName(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

export function flagOf(key: string): string {
  return `--${longName(key)}`;
}

function withHelp(specs: OptionSpecs): OptionSpecs {
  return { ...specs, help: HELP_OPTION };
}

/** The declarations as parseArgs wants them: values kept as strings (converted later), and no keys set to undefined, which it rejects. */
function parseArgsOptions(specs: OptionSpecs) {
  return Object.fromEntries(
    Object.entries(withHelp(specs)).map(([key, spec]) => [
      longName(key),
      {
        type: spec.type === "boolean" ? ("boolean" as const) : ("string" as const),
        ...(spec.short ? { short: spec.short } : {}),
        ...(spec.multiple ? { multiple: true } : {}),
      },
    ]),
  );
}

/** The argv's option tokens, read leniently (unknown options and odd values pass), for looking before the strict parse. */
function lenientTokens(specs: OptionSpecs, argv: string[]) {
  return parseArgs({ args: argv, options: parseArgsOptions(specs), strict: false, allowPositionals: true, tokens: true }).tokens;
}

/** Whether -h or --help is among the options, so that help wins over any mistake beside it. */
export function wantsHelp(specs: OptionSpecs, argv: string[]): boolean {
  return lenientTokens(specs, argv).some((t) => t.kind === "option" && t.name === "help");
}

/**
 * Parses and checks `argv` against the declared options; positionals are allowed only when
 * `allowPositionals`. Throws a {@link UsageError} naming the first problem.
 */
export function parseCommandLine<O extends OptionSpecs>(specs: O, argv: string[], allowPositionals: boolean): CommandLine<O> {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: argv, options: parseArgsOptions(specs), strict: true, allowPositionals });
  } catch (err) {
    throw new UsageError(explainRejection(specs, argv, allowPositionals) ?? (err as Error).message);
  }
  const options: Record<string, unknown> = {};
  const given = new Set<keyof O>();
  for (const [key, spec] of Object.entries(specs)) {
    const value = parsed.values[longName(key)] as string | string[] | boolean | undefined;
    options[key] = resolveValue(key, spec, value);
    if ((Array.isArray(value) ? value.length > 0 : value !== undefined) || (spec.env !== undefined && !!process.env[spec.env])) given.add(key);
  }
  return { options: options as OptionValues<O>, positionals: parsed.positionals, given };
}

function resolveValue(key: string, spec: OptionSpec, given: string | string[] | boolean | undefined): unknown {
  const flag = flagOf(key);
  if (spec.type === "boolean") return given ?? spec.default ?? false;
  if (spec.multiple) {
    const fromEnv = spec.env ? process.env[spec.env] : undefined;
    // An environment variable stands in for a repeatable option only where the option is not given: as one value.
    const texts = (given as string[] | undefined)?.length ? (given as string[]) : fromEnv ? [fromEnv] : [];
    const values = texts.map((text) => convert(spec, flag, text));
    if (spec.required && values.length === 0) throw missing(flag, spec);
    return values;
  }
  if (given !== undefined) return convert(spec, flag, given as string);
  const fromEnv = spec.env ? process.env[spec.env] : undefined;
  if (fromEnv) return convert(spec, `${flag} (from $${spec.env})`, fromEnv);
  if (spec.required) throw missing(flag, spec);
  return spec.default;
}

function missing(flag: string, spec: OptionSpec): UsageError {
  return new UsageError(`${flag} ${placeholder(spec)} is required`);
}

function convert(spec: OptionSpec, flag: string, text: string): unknown {
  const value = valueOf(spec, text);
  if (value === undefined) throw new UsageError(`${flag} ${requirement(spec)} (got ${JSON.stringify(text)})`);
  return value;
}

const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/** The option's value for `text`, or undefined when the option does not accept it. */
function valueOf(spec: OptionSpec, text: string): string | number | undefined {
  if (spec.type === "string") {
    if (spec.choices) return spec.choices.includes(text) ? text : undefined;
    return text === "" ? undefined : text;
  }
  // Plain decimal only: Number() would also take "", " 8", "0x1f" and (for integers) "1e3".
  const pattern = spec.type === "integer" ? INTEGER : DECIMAL;
  const n = pattern.test(text) ? Number(text) : NaN;
  const ok = spec.type === "integer" ? Number.isSafeInteger(n) : Number.isFinite(n);
  return ok && n >= (spec.min ?? -Infinity) && n <= (spec.max ?? Infinity) ? n : undefined;
}

/** What the option needs, for errors: "needs an integer from 0 to 65535", "needs exact, any or off". */
function requirement(spec: OptionSpec): string {
  if (spec.choices) return `needs ${orList(spec.choices)}`;
  if (spec.type === "string") return `needs a value (${placeholder(spec)})`;
  const what = spec.type === "integer" ? "an integer" : "a number";
  const range = rangeText(spec);
  return `needs ${what}${range ? ` ${range}` : ""}`;
}

/** ["a", "b", "c"] → "a, b or c". */
function orList(items: readonly string[]): string {
  return items.length === 1 ? items[0] : `${items.slice(0, -1).join(", ")} or ${items.at(-1)}`;
}

function rangeText(spec: OptionSpec): string {
  const { min, max } = spec;
  if (min !== undefined && max !== undefined) return `from ${min} to ${max}`;
  if (min !== undefined) return `of at least ${min}`;
  if (max !== undefined) return `of at most ${max}`;
  return "";
}

/**
 * parseArgs's strict errors are long and name options by their raw spelling; this finds the same
 * problem in the lenient tokens and says it in one line. Undefined when it finds none.
 */
function explainRejection(specs: OptionSpecs, argv: string[], allowPositionals: boolean): string | undefined {
  const known = withHelp(specs);
  const byLongName = new Map(Object.entries(known).map(([key, spec]) => [longName(key), spec]));
  const namesAnOption = (text: string) => {
    const [name] = text.split("=", 1);
    if (name.startsWith("--")) return byLongName.has(name.slice(2));
    return /^-[A-Za-z]$/.test(name) && Object.values(known).some((s) => s.short === name.slice(1));
  };
  for (const token of lenientTokens(specs, argv)) {
    if (token.kind === "positional" && !allowPositionals) return `unexpected argument ${token.value}`;
    if (token.kind !== "option") continue;
    const spec = byLongName.get(token.name);
    if (!spec) return `unknown option ${token.rawName}`;
    const flag = `--${token.name}`;
    if (spec.type === "boolean") {
      if (token.inlineValue) return `${flag} takes no value`;
      continue;
    }
    if (token.value === undefined || (!token.inlineValue && namesAnOption(token.value))) return `${flag} ${requirement(spec)}`;
    // parseArgs takes no separate value that starts with a dash (it might be a forgotten value).
    if (!token.inlineValue && token.value.startsWith("-")) {
      if (valueOf(spec, token.value) === undefined) return `${flag} ${requirement(spec)} (got ${JSON.stringify(token.value)})`;
      return `${flag} ${requirement(spec)}; to pass ${JSON.stringify(token.value)}, write ${flag}=${token.value}`;
    }
  }
  return undefined;
}

function placeholder(spec: OptionSpec): string {
  if (spec.value) return spec.value;
  if (spec.choices) return spec.choices.join("|");
  return spec.type === "string" ? "<value>" : "N";
}

/** What a command's help is made of. */
export interface HelpSource {
  /** The command's name, as typed after `kiln`. */
  command: string;
  /** The positional arguments as the usage line shows them ("<slug> <prompt>..."); one entry per form of the command. */
  synopses: string[];
  /** Prose between the usage line and the options: what the command does. */
  intro: string;
  options: OptionSpecs;
}

const HELP_WIDTH = 100;
/** Wider option names put their description on the next line. */
const MAX_NAME_COLUMN = 32;
/** Joins words that the wrap must not split ("default: 16"); printed as a space. */
const NO_BREAK = "\u00a0";

/** The --help text: usage line(s), the intro, and every option with its value, range, default and description. */
export function formatHelp(source: HelpSource): string {
  return [...usageLines(source), "", source.intro.trim(), "", "Options:", ...optionLines(withHelp(source.options))].join("\n");
}

function usageLines(source: HelpSource): string[] {
  return synopsisLines(source).map((words, i) => `${i === 0 ? "Usage: " : "       "}${words}`);
}

/** The command's forms as typed: "kiln serve --model <slug>... [options]", one per synopsis. */
export function synopsisLines({ command, synopses, options }: HelpSource): string[] {
  const required = Object.entries(options)
    .filter(([, spec]) => spec.required)
    .map(([key, spec]) => `${flagOf(key)} ${placeholder(spec)}${spec.multiple ? "..." : ""}`);
  return (synopses.length > 0 ? synopses : [""]).map((synopsis) => [`kiln ${command}`, synopsis, ...required, "[options]"].filter(Boolean).join(" "));
}

function optionLines(specs: OptionSpecs): string[] {
  const rows = Object.entries(specs).map(([key, spec]) => ({ name: optionName(key, spec), text: optionText(spec) }));
  const column = Math.max(...rows.map((r) => r.name.length).filter((n) => n <= MAX_NAME_COLUMN)) + 4;
  return rows.flatMap(({ name, text }) => {
    const [first, ...rest] = wrap(text, HELP_WIDTH - column);
    const head = name.length + 4 <= column ? [`  ${name.padEnd(column - 2)}${first}`] : [`  ${name}`, " ".repeat(column) + first];
    return [...head, ...rest.map((line) => " ".repeat(column) + line)];
  });
}

/** "-m, --model <slug>" or "    --port N": long names line up whether or not there is a short one. */
function optionName(key: string, spec: OptionSpec): string {
  return `${spec.short ? "" : "    "}${optionSignature(key, spec)}`;
}

/** How the option is typed: "-m, --model <slug>", "--port N", "--force". */
export function optionSignature(key: string, spec: OptionSpec): string {
  return `${spec.short ? `-${spec.short}, ` : ""}${flagOf(key)}${spec.type === "boolean" ? "" : ` ${placeholder(spec)}`}`;
}

/** The description, then [accepted values; repeatable; required; default]. */
function optionText(spec: OptionSpec): string {
  const notes = optionNotes(spec, NO_BREAK);
  return notes.length > 0 ? `${spec.description} [${notes.join("; ")}]` : spec.description;
}

/**
 * What the declaration says beside the description: the accepted range or values, repeatable,
 * required, and the default (an environment variable first where one stands in). `space` joins the
 * words of one note; the help passes a no-break space so that its wrap keeps each note whole.
 */
export function optionNotes(spec: OptionSpec, space = " "): string[] {
  const notes: string[] = [];
  if (spec.type === "integer" || spec.type === "number") {
    const range = rangeText(spec).replace(/^(from|of) /, "");
    if (range) notes.push(range.replaceAll(" ", space));
  }
  if (spec.choices && placeholder(spec) !== spec.choices.join("|")) notes.push(spec.choices.join(", "));
  if (spec.multiple) notes.push("repeatable");
  if (spec.required) notes.push("required");
  const fallback = spec.default === undefined || spec.default === false ? undefined : String(spec.default);
  if (spec.env) notes.push(`default:${space}$${spec.env}${fallback ? `, else${space}${fallback}` : ""}`);
  else if (fallback) notes.push(`default:${space}${fallback}`);
  return notes;
}

/** Greedy word wrap at spaces (not {@link NO_BREAK}); a word longer than the width gets a line of its own. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/[ \t\n]+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line ? `${line} ${word}` : word;
    }
  }
  return [...lines, line].map((l) => l.replaceAll(NO_BREAK, " "));
}
