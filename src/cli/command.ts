/** What every CLI command is: a declaration (options, help prose, run) turned into argv → exit code. */
import { formatHelp, parseCommandLine, UsageError, wantsHelp, type CommandLine, type HelpSource, type OptionSpecs } from "./options.js";

/** Where a command writes: the process's streams, or a capture in tests. */
export interface CommandIO {
  /** Read by `kiln run` without a prompt: a terminal holds a conversation, a pipe gives the prompt. Default: none. */
  stdin?: NodeJS.ReadableStream & { isTTY?: boolean };
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown; isTTY?: boolean; columns?: number };
}

export interface CommandDefinition<O extends OptionSpecs> {
  /** The word after `kiln`. */
  name: string;
  /** One line for `kiln --help`. */
  description: string;
  /** Prose for the command's help, between the usage line and the options. */
  intro: string;
  /** The positional arguments as the usage line shows them ("<slug> <prompt>..."), one entry per form; absent when the command takes none. */
  positionals?: string | string[];
  options: O;
  /**
   * The command's work, given a command line that matches the declarations; resolves to the exit
   * code. Throws {@link UsageError} for mistakes the declarations cannot express (a missing slug).
   */
  run(commandLine: CommandLine<O>, io: CommandIO): Promise<number>;
}

export interface Command {
  name: string;
  description: string;
  /** The generated --help text. */
  help: string;
  /** What the help is made of, for other renderings of it (the CLI reference in docs/cli.md). */
  helpSource: HelpSource;
  /**
   * Runs the command on its argv (after the command's name); resolves to the process exit code:
   * 0 ok, 1 the work failed, 2 the command line was wrong (message and help on stderr).
   */
  run(argv: string[], io?: CommandIO): Promise<number>;
}

export function defineCommand<O extends OptionSpecs>(definition: CommandDefinition<O>): Command {
  const { name, description, options } = definition;
  const synopses = definition.positionals === undefined ? [] : [definition.positionals].flat();
  const helpSource: HelpSource = { command: name, synopses, intro: definition.intro, options };
  const help = formatHelp(helpSource);
  return {
    name,
    description,
    help,
    helpSource,
    async run(argv, io = process) {
      try {
        if (wantsHelp(options, argv)) {
          io.stdout.write(`${help}\n`);
          return 0;
        }
        return await definition.run(parseCommandLine(options, argv, synopses.length > 0), io);
      } catch (err) {
        if (err instanceof UsageError) {
          io.stderr.write(`kiln ${name}: ${err.message}\n\n${help}\n`);
          return 2;
        }
        // Commands report the failures they expect; this keeps a stack trace off the terminal for the rest.
        io.stderr.write(`kiln ${name}: ${err instanceof Error ? err.message : String(err)}\n`);
        return 1;
      }
    },
  };
}
