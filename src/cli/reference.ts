/**
 * The CLI reference (docs/cli.md) as markdown, rendered from the same declarations as each
 * command's --help (usage forms, intro, options with their ranges and defaults), so the page cannot
 * say something the parser does not do. `npm run docs` writes it; a unit test fails when the
 * committed page differs from this rendering.
 */
import type { Command } from "./command.js";
import { optionNotes, optionSignature, synopsisLines, type OptionSpecs } from "./options.js";

/** What no single command declares: how to start kiln, how options are written, what exit codes mean. */
const PREAMBLE = `# The kiln command line

\`node bin/kiln.mjs <command>\` from a checkout (or \`npx kiln <command>\`, or \`npm run kiln -- <command>\`,
which installs the npm dependencies first). \`kiln --help\` lists the commands; \`kiln <command> --help\`
(or \`kiln help <command>\`) prints a command's usage and options, the same text as this page.

- **Options** take \`--name value\` or \`--name=value\`; write the second for a value that starts
  with \`-\`. Every command also takes \`-h\`/\`--help\`, which wins over any mistake beside it.
- **Exit codes**: 0 the command did its work; 1 the work failed (the reason on stderr); 2 a usage
  error: a one-line message naming the option or argument, then the command's help, on stderr.
- **Where things live**: \`KILN_HOME\` (default \`~/.kiln\`) holds the pulled weights, the compiled
  artifacts and \`kiln.sqlite\` (compiles, promotions, track records; keys and usage too when
  \`--cloud\` keeps its default database). The other environment variables are in [configuration.md](configuration.md).`;

/** The reference page for `commands`, in their order. */
export function renderCliReference(commands: readonly Command[]): string {
  const index = ["| command | what it does |", "|---|---|", ...commands.map((c) => `| [\`kiln ${c.name}\`](#kiln-${c.name}) | ${inline(c.description)} |`)];
  const note = "<!-- Generated from the command declarations in src/cli/ by `npm run docs`; edit those, not this file. -->";
  return [note, PREAMBLE, "## Commands", index.join("\n"), ...commands.map(commandSection)].join("\n\n") + "\n";
}

function commandSection(command: Command): string {
  const source = command.helpSource;
  const parts = [`## \`kiln ${command.name}\``, ["```text", ...synopsisLines(source), "```"].join("\n"), ...paragraphs(source.intro)];
  const options = optionItems(source.options);
  if (options.length > 0) parts.push(["Options:", "", ...options].join("\n"));
  return parts.join("\n\n");
}

function optionItems(specs: OptionSpecs): string[] {
  return Object.entries(specs).map(([key, spec]) => {
    const notes = optionNotes(spec);
    return `- \`${optionSignature(key, spec)}\`: ${inline(spec.description)}${notes.length > 0 ? ` [${inline(notes.join("; "))}]` : ""}`;
  });
}

/**
 * The help's intro as markdown: its paragraphs as they are, and an indented block (a list of
 * subcommands, aligned for the terminal) as a text block, which keeps its alignment.
 */
function paragraphs(intro: string): string[] {
  return intro
    .trim()
    .split(/\n\s*\n/)
    .map((block) => {
      const lines = block.split("\n");
      if (lines.every((line) => /^\s/.test(line))) return ["```text", ...lines.map((line) => line.replace(/^ {2}/, "")), "```"].join("\n");
      return lines.map((line) => inline(line.trim())).join("\n");
    });
}

/**
 * Help text made safe for markdown prose: a word holding a placeholder (`<slug>`,
 * `$KILN_HOME/models/<slug>/`) becomes code, so that it is not read as an HTML tag; text already in
 * backticks is left alone.
 */
function inline(text: string): string {
  return text
    .split(/(`[^`]*`)/)
    .map((piece, i) => {
      if (i % 2 === 1) return piece;
      return piece.replace(/[^\s(]*<[^\s>]*>[^\s,;:)]*/g, (word) => `\`${word.replace(/\.$/, "")}\`${word.endsWith(".") ? "." : ""}`).replaceAll("|", "\\|");
    })
    .join("");
}
