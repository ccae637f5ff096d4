/** The option declarations: parsing through parseArgs, checking, typed values, and the generated help. */
import { describe, expect, it } from "vitest";
import { flagOf, formatHelp, option, parseCommandLine, UsageError, wantsHelp } from "../../../src/cli/options.js";

const specs = {
  model: option.string({ short: "m", value: "<slug>", multiple: true, required: true, description: "a model to serve" }),
  port: option.integer({ min: 0, max: 65535, default: 8000, description: "TCP port" }),
  temperature: option.number({ min: 0, max: 2, default: 0.7, description: "sampling temperature" }),
  seed: option.integer({ description: "sampling seed" }),
  prefixReuse: option.choice(["exact", "any", "off"], { default: "exact", description: "prefix reuse" }),
  logLevel: option.choice(["info", "debug"], { value: "<level>", env: "KILN_TEST_LEVEL", default: "info", description: "log level" }),
  system: option.string({ value: "<text>", description: "system message" }),
  cloud: option.flag({ description: "cloud mode" }),
};

function parse(argv: string[], allowPositionals = false) {
  return parseCommandLine(specs, argv, allowPositionals);
}

function usageError(argv: string[], allowPositionals = false): string {
  try {
    parse(argv, allowPositionals);
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as Error).message;
  }
  throw new Error(`no usage error for ${argv.join(" ")}`);
}

describe("parseCommandLine", () => {
  it("applies the defaults", () => {
    const { options, positionals } = parse(["--model", "a"]);
    expect(options).toEqual({
      model: ["a"],
      port: 8000,
      temperature: 0.7,
      seed: undefined,
      prefixReuse: "exact",
      logLevel: "info",
      system: undefined,
      cloud: false,
    });
    expect(positionals).toEqual([]);
  });

  it("reads long names in kebab case, short aliases, --name=value, repeats and positionals", () => {
    const { options, positionals } = parse(
      [
        "-m",
        "a",
        "--model=b",
        "--port",
        "0",
        "--temperature",
        "1.5",
        "--seed=-3",
        "--prefix-reuse",
        "off",
        "--system",
        "be brief",
        "--cloud",
        "p",
        "--",
        "--q",
      ],
      true,
    );
    expect(options).toMatchObject({ model: ["a", "b"], port: 0, temperature: 1.5, seed: -3, prefixReuse: "off", system: "be brief", cloud: true });
    expect(positionals).toEqual(["p", "--q"]);
    expect(flagOf("prefixReuse")).toBe("--prefix-reuse");
  });

  it("tells the options the operator set from those at their defaults", () => {
    expect([...parse(["--model", "a"]).given].sort()).toEqual(["model"]);
    expect([...parse(["-m", "a", "--port", "8000", "--cloud"]).given].sort()).toEqual(["cloud", "model", "port"]);
    process.env.KILN_TEST_LEVEL = "debug";
    try {
      expect(parse(["-m", "a"]).given.has("logLevel")).toBe(true);
    } finally {
      delete process.env.KILN_TEST_LEVEL;
    }
  });

  it("takes an absent option from its environment variable, checked like a given value", () => {
    process.env.KILN_TEST_LEVEL = "debug";
    try {
      expect(parse(["-m", "a"]).options.logLevel).toBe("debug");
      expect(parse(["-m", "a", "--log-level", "info"]).options.logLevel).toBe("info");
      process.env.KILN_TEST_LEVEL = "loud";
      expect(usageError(["-m", "a"])).toBe('--log-level (from $KILN_TEST_LEVEL) needs info or debug (got "loud")');
    } finally {
      delete process.env.KILN_TEST_LEVEL;
    }
  });

  it("takes an absent repeatable option from its environment variable, as one value", () => {
    const keys = { key: option.string({ value: "<key>", multiple: true, env: "KILN_TEST_KEYS", description: "a key" }) };
    process.env.KILN_TEST_KEYS = "k1,k2";
    try {
      const fromEnv = parseCommandLine(keys, [], false);
      expect(fromEnv.options.key).toEqual(["k1,k2"]);
      expect(fromEnv.given.has("key")).toBe(true);
      expect(parseCommandLine(keys, ["--key", "a", "--key", "b"], false).options.key).toEqual(["a", "b"]);
      delete process.env.KILN_TEST_KEYS;
      expect(parseCommandLine(keys, [], false).options.key).toEqual([]);
    } finally {
      delete process.env.KILN_TEST_KEYS;
    }
  });

  it("names the option in a one-line error", () => {
    const cases: Array<[string[], string]> = [
      [[], "--model <slug> is required"],
      [["-m"], "--model needs a value (<slug>)"],
      [["-m", "--port", "1"], "--model needs a value (<slug>)"],
      [["-m", ""], '--model needs a value (<slug>) (got "")'],
      [["-m", "a", "--port", "x"], '--port needs an integer from 0 to 65535 (got "x")'],
      [["-m", "a", "--port", "65536"], '--port needs an integer from 0 to 65535 (got "65536")'],
      [["-m", "a", "--port", "1e3"], '--port needs an integer from 0 to 65535 (got "1e3")'],
      [["-m", "a", "--port", "0x50"], '--port needs an integer from 0 to 65535 (got "0x50")'],
      [["-m", "a", "--port", " "], '--port needs an integer from 0 to 65535 (got " ")'],
      [["-m", "a", "--port"], "--port needs an integer from 0 to 65535"],
      [["-m", "a", "--temperature", "-1"], '--temperature needs a number from 0 to 2 (got "-1")'],
      [["-m", "a", "--temperature", "warm"], '--temperature needs a number from 0 to 2 (got "warm")'],
      [["-m", "a", "--seed", "1.5"], '--seed needs an integer (got "1.5")'],
      [["-m", "a", "--seed", "-5"], '--seed needs an integer; to pass "-5", write --seed=-5'],
      [["-m", "a", "--system", "-x"], '--system needs a value (<text>); to pass "-x", write --system=-x'],
      [["-m", "a", "--prefix-reuse", "some"], '--prefix-reuse needs exact, any or off (got "some")'],
      [["-m", "a", "--cloud=yes"], "--cloud takes no value"],
      [["-m", "a", "--bogus"], "unknown option --bogus"],
      [["-m", "a", "-x"], "unknown option -x"],
      [["-m", "a", "extra"], "unexpected argument extra"],
    ];
    for (const [argv, message] of cases) expect(usageError(argv), argv.join(" ")).toBe(message);
  });

  it("finds --help anywhere among the options, but not as a value or after --", () => {
    expect(wantsHelp(specs, ["--bogus", "-h"])).toBe(true);
    expect(wantsHelp(specs, ["--port", "x", "--help"])).toBe(true);
    expect(wantsHelp(specs, ["--system=--help"])).toBe(false);
    expect(wantsHelp(specs, ["--", "--help"])).toBe(false);
  });
});

describe("formatHelp", () => {
  const help = formatHelp({ command: "demo", synopses: ["<slug> <prompt>..."], intro: "Does the demo.", options: specs });
  const lines = help.split("\n");

  it("starts with the usage line (positionals, required options) and the intro", () => {
    expect(lines.slice(0, 3)).toEqual(["Usage: kiln demo <slug> <prompt>... --model <slug>... [options]", "", "Does the demo."]);
    expect(lines[4]).toBe("Options:");
  });

  it("lists every declared option, with its value, range and default, aligned", () => {
    const expected: Array<[string, string]> = [
      ["-m, --model <slug>", "a model to serve [repeatable; required]"],
      ["    --port N", "TCP port [0 to 65535; default: 8000]"],
      ["    --temperature N", "sampling temperature [0 to 2; default: 0.7]"],
      ["    --seed N", "sampling seed"],
      ["    --prefix-reuse exact|any|off", "prefix reuse [default: exact]"],
      ["    --log-level <level>", "log level [info, debug; default: $KILN_TEST_LEVEL, else info]"],
      ["    --system <text>", "system message"],
      ["    --cloud", "cloud mode"],
      ["-h, --help", "show this help"],
    ];
    const optionLines = lines.slice(5);
    expect(optionLines).toHaveLength(expected.length);
    const column = optionLines[0]!.indexOf("a model");
    expected.forEach(([name, text], i) => expect(optionLines[i]).toBe(`  ${name}`.padEnd(column) + text));
  });

  it("one usage line per form, and wraps long descriptions under their column", () => {
    const text = formatHelp({
      command: "keys",
      synopses: ["create", "revoke <id>"],
      intro: "Keys.",
      options: { models: option.string({ description: "word ".repeat(40).trim(), default: "all" }) },
    });
    const [first, second] = text.split("\n");
    expect(first).toBe("Usage: kiln keys create [options]");
    expect(second).toBe("       kiln keys revoke <id> [options]");
    const optionLines = text.split("\n").slice(text.split("\n").indexOf("Options:") + 1, -1);
    expect(optionLines.length).toBeGreaterThan(1);
    for (const line of optionLines) expect(line.length).toBeLessThanOrEqual(100);
    expect(optionLines.at(-1)).toMatch(/^ +word.*\[default: all\]$/);
  });
});
