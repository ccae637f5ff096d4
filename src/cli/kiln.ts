import { kilnVersion } from "../catalogue/version.js";
import { COMPILER_VERSION } from "../compiler/compile.js";
import type { Command, CommandIO } from "./command.js";
import batch from "./commands/batch.js";
import bench from "./commands/bench.js";
import compile from "./commands/compile.js";
import compiler from "./commands/compiler.js";
import keys from "./commands/keys.js";
import models from "./commands/models.js";
import promote from "./commands/promote.js";
import pull from "./commands/pull.js";
import rm from "./commands/rm.js";
import rollback from "./commands/rollback.js";
import runCommand from "./commands/run.js";
import serve from "./commands/serve.js";
import track from "./commands/track.js";
import tracks from "./commands/tracks.js";
import usage from "./commands/usage.js";

/** Every command, in the order `kiln --help` and docs/cli.md list them. */
export const COMMANDS: readonly Command[] = [
  models,
  pull,
  rm,
  compile,
  runCommand,
  batch,
  bench,
  serve,
  keys,
  usage,
  track,
  tracks,
  promote,
  rollback,
  compiler,
];

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    "Usage: kiln <command> [options]",
    "",
    "Commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.description}`),
    "",
    "Run `kiln <command> --help` (or `kiln help <command>`) for a command's options, `kiln --version`",
    "for the version. KILN_HOME (default ~/.kiln) holds models, artifacts and records.",
  ].join("\n");
}

/** The composition root: picks the command and returns the exit code (0 ok, 1 failure, 2 usage error). */
export async function main(argv: string[], io: CommandIO = process): Promise<number> {
  const [name, ...rest] = argv;
  if (!name) {
    io.stderr.write(`kiln: which command?\n\n${help()}\n`);
    return 2;
  }
  if (name === "-h" || name === "--help" || name === "help") return showHelp(rest[0], io);
  if (name === "-V" || name === "--version" || name === "version") {
    io.stdout.write(`kiln ${kilnVersion()} (compiler ${COMPILER_VERSION})\n`);
    return 0;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    io.stderr.write(`kiln: unknown command "${name}"\n\n${help()}\n`);
    return 2;
  }
  return command.run(rest, io);
}

/** `kiln --help`, or `kiln help <command>` for that command's help. */
function showHelp(commandName: string | undefined, io: CommandIO): number {
  if (commandName === undefined) {
    io.stdout.write(`${help()}\n`);
    return 0;
  }
  const command = COMMANDS.find((c) => c.name === commandName);
  if (!command) {
    io.stderr.write(`kiln: unknown command "${commandName}"\n\n${help()}\n`);
    return 2;
  }
  io.stdout.write(`${command.help}\n`);
  return 0;
}
