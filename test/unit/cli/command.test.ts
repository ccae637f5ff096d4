/** defineCommand's exit codes and streams, and `kiln`'s own help. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { COMPILER_VERSION } from "../../../src/compiler/compile.js";
import { defineCommand } from "../../../src/cli/command.js";
import { main } from "../../../src/cli/kiln.js";
import { option, UsageError } from "../../../src/cli/options.js";
import { capture } from "./capture.js";

const echo = defineCommand({
  name: "echo",
  description: "Echo the words",
  intro: "Prints its words.",
  positionals: "<word>...",
  options: { times: option.integer({ min: 1, max: 3, default: 1, description: "how many times" }) },
  async run({ options, positionals }, io) {
    if (positionals.includes("boom")) throw new Error("exploded\nwith details");
    if (positionals.length === 0) throw new UsageError("which words?");
    io.stdout.write(`${Array(options.times).fill(positionals.join(" ")).join("\n")}\n`);
    return 0;
  },
});

describe("defineCommand", () => {
  it("runs with the parsed options: exit 0", async () => {
    const { out, io } = capture();
    expect(await echo.run(["--times", "2", "hi", "there"], io)).toBe(0);
    expect(out).toEqual({ stdout: "hi there\nhi there\n", stderr: "" });
  });

  it("prints the help on stdout for -h or --help, whatever else is on the line: exit 0", async () => {
    for (const argv of [["-h"], ["--times", "9", "--help"], ["--bogus", "-h"]]) {
      const { out, io } = capture();
      expect(await echo.run(argv, io)).toBe(0);
      expect(out).toEqual({ stdout: `${echo.help}\n`, stderr: "" });
    }
    expect(echo.help).toMatch(/^Usage: kiln echo <word>\.\.\. \[options\]\n\nPrints its words\.\n\nOptions:\n/);
  });

  it("a usage error (from the options or from run): message and help on stderr, exit 2", async () => {
    for (const [argv, message] of [
      [["--times", "9", "x"], '--times needs an integer from 1 to 3 (got "9")'],
      [[], "which words?"],
    ] as const) {
      const { out, io } = capture();
      expect(await echo.run([...argv], io)).toBe(2);
      expect(out).toEqual({ stdout: "", stderr: `kiln echo: ${message}\n\n${echo.help}\n` });
    }
  });

  it("a failure the command did not catch: its message on stderr, exit 1", async () => {
    const { out, io } = capture();
    expect(await echo.run(["boom"], io)).toBe(1);
    expect(out).toEqual({ stdout: "", stderr: "kiln echo: exploded\nwith details\n" });
  });
});

describe("kiln", () => {
  it("lists the commands for --help", async () => {
    const { out, io } = capture();
    expect(await main(["--help"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln <command> \[options\]/);
    for (const name of ["models", "pull", "compile", "run", "serve", "keys"]) expect(out.stdout).toMatch(new RegExp(`^  ${name} +\\S`, "m"));
  });

  it("prints its version and the compiler's for --version, -V and `kiln version`", async () => {
    const { version } = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version: string };
    for (const argv of [["--version"], ["-V"], ["version"]]) {
      const { out, io } = capture();
      expect(await main(argv, io)).toBe(0);
      expect(out.stdout).toBe(`kiln ${version} (compiler ${COMPILER_VERSION})\n`);
    }
  });

  it("shows a command's help for `kiln help <command>`", async () => {
    const { out, io } = capture();
    expect(await main(["help", "compile"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln compile <slug\|file\.gguf> \[options\]/);
  });

  it("a missing or unknown command is a usage error", async () => {
    for (const [argv, message] of [
      [[], "kiln: which command?"],
      [["nope"], 'kiln: unknown command "nope"'],
      [["help", "nope"], 'kiln: unknown command "nope"'],
    ] as const) {
      const { out, io } = capture();
      expect(await main([...argv], io)).toBe(2);
      expect(out.stdout).toBe("");
      expect(out.stderr.startsWith(`${message}\n\nUsage: kiln <command>`)).toBe(true);
    }
  });
});
