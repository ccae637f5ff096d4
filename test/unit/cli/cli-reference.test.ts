/** docs/cli.md is the CLI reference rendered from the command declarations; it must not drift from them. */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../../../src/cli/kiln.js";
import { renderCliReference } from "../../../src/cli/reference.js";

describe("the CLI reference", () => {
  const rendered = renderCliReference(COMMANDS);

  it("docs/cli.md is the current rendering of the declarations", () => {
    const committed = readFileSync(resolve("docs/cli.md"), "utf8");
    const [want, got] = [rendered.split("\n"), committed.split("\n")];
    const line = want.findIndex((text, i) => text !== got[i]);
    // A plain toBe would print both whole pages; this names the first difference and the fix.
    const stale = `docs/cli.md is stale from line ${line + 1} (${JSON.stringify(want[line])} expected): run \`npm run docs\` to regenerate it from src/cli/`;
    expect(committed === rendered, stale).toBe(true);
  });

  it("has every command with its usage and every option with what --help says of it", () => {
    for (const command of COMMANDS) {
      expect(rendered).toContain(`## \`kiln ${command.name}\``);
      expect(rendered).toContain(`kiln ${command.name}`);
    }
    const serve = COMMANDS.find((c) => c.name === "serve")!;
    expect(serve.help).toContain("--max-running N");
    expect(rendered).toMatch(/^- `--max-running N`: sequences generating at once per model.*\[1 to 256; default: 16\]$/m);
    expect(rendered).toMatch(/^- `-m, --model <slug\|file\.gguf>`: a model to load at start .*\[repeatable\]$/m);
    expect(rendered).toContain("kiln serve [options]");
  });

  it("keeps placeholders out of HTML: a word holding <...> in prose is code", () => {
    const prose = rendered.replace(/```[\s\S]*?```/g, "").replace(/`[^`\n]*`/g, "");
    expect(prose.replace(/<!--.*?-->/g, "")).not.toMatch(/<[a-z]/i);
  });
});
