import type { Command, CommandIO } from "./command.js";
import * as compile from "./commands/compile.js";
import * as keys from "./commands/keys.js";
import * as models from "./commands/models.js";
import * as pull from "./commands/pull.js";
import * as runCommand from "./commands/run.js";
import * as serve from "./commands/serve.js";

const COMMANDS: Command[] = [models, pull, compile, runCommand, serve, keys];

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    "Usage: kiln <command> [options]",
    "",
    "Commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.description}`),
    "",
    "Run `kiln <command> --help` for a command's options. KILN_HOME (default ~/.kiln) holds models,",
    "artifacts and records.",
  ].join("\n");
}

/** The composition root: picks the command and returns the exit code. */
export async function main(argv: string[], io: CommandIO = process): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "-h" || name === "--help" || name === "help") {
    io.stdout.write(help() + "\n");
    return name ? 0 : 2;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    io.stderr.write(`kiln: unknown command "${name}"\n\n${help()}\n`);
    return 2;
  }
  return command.run(rest, io);
}
