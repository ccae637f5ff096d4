/** `kiln keys` and the argument handling of `kiln serve` (no model is loaded here). */
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { hashKey, KeyStore } from "../../../src/cloud/keys/key-store.js";
import { SqliteCloudStore } from "../../../src/cloud/store/sqlite-store.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import keys from "../../../src/cli/commands/keys.js";
import serve from "../../../src/cli/commands/serve.js";
import { offersOperatorActions } from "../../../src/cli/serve-session.js";
import { selfSignedCertificate } from "../../support/tls.js";
import { capture } from "./capture.js";

describe("kiln keys", () => {
  let home: string;
  let saved: string | undefined;
  beforeEach(() => {
    saved = process.env.KILN_HOME;
    home = mkdtempSync(join(tmpdir(), "kiln-keys-"));
    process.env.KILN_HOME = home;
  });
  afterEach(() => {
    process.env.KILN_HOME = saved;
    rmSync(home, { recursive: true, force: true });
  });

  it("creates a key (printed once), lists it without the key, and revokes it", async () => {
    const created = capture();
    expect(await keys.run(["create", "--name", "ci", "--models", "smollm2-135m-instruct,smollm2-360m-instruct"], created.io)).toBe(0);
    const key = created.out.stdout.trim();
    expect(key).toMatch(/^kiln-[A-Za-z0-9_-]{20,}$/);
    const db = openDatabase({ home });
    const row = db.prepare("SELECT id, key_hash, models_json FROM api_keys").get() as { id: string; key_hash: string; models_json: string };
    db.close();
    // Keyed with the secret kiln made in KILN_HOME at first use (owner-only), never a bare hash of the key.
    const secret = readFileSync(join(home, "key-secret"), "utf8").trim();
    expect(statSync(join(home, "key-secret")).mode & 0o077).toBe(0);
    expect(row.key_hash).toBe(hashKey(key, Buffer.from(secret)));
    expect(JSON.parse(row.models_json)).toEqual(["smollm2-135m-instruct", "smollm2-360m-instruct"]);

    const listed = capture();
    expect(await keys.run(["list"], listed.io)).toBe(0);
    expect(listed.out.stdout).toContain(row.id);
    expect(listed.out.stdout).toContain("ci");
    expect(listed.out.stdout).not.toContain(key);
    const json = capture();
    await keys.run(["list", "--json"], json.io);
    expect(JSON.parse(json.out.stdout)).toMatchObject([{ id: row.id, name: "ci", revokedAt: null }]);

    expect(await keys.run(["revoke", row.id], capture().io)).toBe(0);
    const again = capture();
    expect(await keys.run(["revoke", row.id], again.io)).toBe(1);
    const after = capture();
    await keys.run(["list", "--json"], after.io);
    expect(JSON.parse(after.out.stdout)[0].revokedAt).toMatch(/^\d{4}-/);
  });

  it("makes an admin key with --admin, which the list and the key's check say; keys are plain without it", async () => {
    const admin = capture();
    expect(await keys.run(["create", "--name", "ops", "--admin"], admin.io)).toBe(0);
    expect(admin.out.stderr).toMatch(/^created admin key key_/);
    expect(await keys.run(["create", "--name", "client"], capture().io)).toBe(0);

    const json = capture();
    await keys.run(["list", "--json"], json.io);
    expect(JSON.parse(json.out.stdout).map((k: { name: string; admin: boolean }) => [k.name, k.admin])).toEqual([
      ["ops", true],
      ["client", false],
    ]);
    const table = capture();
    await keys.run(["list"], table.io);
    const lines = table.out.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/\bNAME +ADMIN +MODELS\b/);
    expect(lines.find((l) => l.includes(" ops "))).toMatch(/ ops +yes /);
    expect(lines.find((l) => l.includes(" client "))).toMatch(/ client +- /);

    // What the auth hook puts on the request: the key's check carries the flag.
    const db = openDatabase({ home });
    const store = new SqliteCloudStore(db);
    const secret = Buffer.from(readFileSync(join(home, "key-secret"), "utf8").trim());
    const verified = await new KeyStore(store, secret, { cacheMs: 0 }).verify(admin.out.stdout.trim());
    db.close();
    expect(verified).toMatchObject({ name: "ops", admin: true });
  });

  it("rejects bad arguments with a message and the help, on stderr", async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /^kiln keys: which subcommand\? \(create, list or revoke\)\n/],
      [["make"], /^kiln keys: unknown subcommand make\n/],
      [["create"], /^kiln keys: create needs --name <name>\n/],
      [["create", "--name", "x", "--models", "nope"], /^kiln keys: unknown model: nope/],
      [["create", "--name", "x", "--models", ","], /^kiln keys: --models needs at least one slug\n/],
      [["create", "--name"], /^kiln keys: --name needs a value \(<name>\)\n/],
      [["revoke"], /^kiln keys: revoke needs one key id\n/],
      [["list", "extra"], /^kiln keys: unexpected argument extra\n/],
      [["list", "--bogus"], /^kiln keys: unknown option --bogus\n/],
    ];
    for (const [argv, message] of cases) {
      const { io, out } = capture();
      expect(await keys.run(argv, io), argv.join(" ")).toBe(2);
      expect(out.stderr).toMatch(message);
      expect(out.stderr).toContain("Usage: kiln keys create");
      expect(out.stdout).toBe("");
    }
    const { io, out } = capture();
    expect(await keys.run(["--help"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln keys create \[options\]\n +kiln keys list \[options\]\n +kiln keys revoke <id> \[options\]/);
    for (const option of ["--name <name>", "--models <slug,...>", "--json"]) expect(out.stdout).toContain(option);
  });
});

describe("kiln serve arguments", () => {
  it("prints help", async () => {
    const { io, out } = capture();
    expect(await serve.run(["--help"], io)).toBe(0);
    expect(out.stdout).toMatch(/^Usage: kiln serve \[options\]\n/);
    const options = [
      "-m, --model <slug|file.gguf>",
      "--keep-alive <seconds>",
      "--memory-budget MiB",
      "--pull-on-demand",
      "--port N",
      "--host <address>",
      "--cloud",
      "--threads N",
      "--max-running N",
      "--max-waiting N",
      "--prefill-chunk N",
      "--prefix-reuse exact|any|off",
      "--kv-memory-mb MiB",
      "--log-level <level>",
      "-h, --help",
    ];
    for (const option of options) expect(out.stdout).toContain(option);
    for (const value of ["default: 8000", "default: 127.0.0.1", "default: 2", "default: exact", "default: $KILN_LOG_LEVEL, else info"]) {
      expect(out.stdout).toContain(value);
    }
    // The KV budget has no fixed default: it is sized per model from the machine's memory.
    expect(out.stdout).not.toContain("default: 4096");
    expect(out.stdout.replace(/\s+/g, " ")).toContain("a quarter of the available memory but at most an eighth of the machine's (or cgroup's) total");
  });

  it("rejects missing or unknown models and bad options before doing anything", async () => {
    const slug = "smollm2-135m-instruct";
    const cases: Array<[string[], string]> = [
      [["--model"], "--model needs a value (<slug|file.gguf>)"],
      [["--model", "--port", "80"], "--model needs a value (<slug|file.gguf>)"],
      [["--model", "gpt-9"], "unknown model: gpt-9 (run `kiln models` for the list)"],
      [["-m", slug, "-m", "whisper-huge"], "unknown model: whisper-huge (run `kiln models` for the list)"],
      [["--keep-alive", "-1"], '--keep-alive needs a number from 0 to 31536000 (got "-1")'],
      [["--memory-budget", "0"], '--memory-budget needs an integer from 1 to 1073741824 (got "0")'],
      [["--pull-on-demand=yes"], "--pull-on-demand takes no value"],
      [["--model", slug, "--port", "99999"], '--port needs an integer from 0 to 65535 (got "99999")'],
      [["--model", slug, "--port", "x"], '--port needs an integer from 0 to 65535 (got "x")'],
      [["--model", slug, "--port=80.5"], '--port needs an integer from 0 to 65535 (got "80.5")'],
      [["--model", slug, "--threads", "0"], '--threads needs an integer from 1 to 256 (got "0")'],
      [["--model", slug, "--max-waiting", "-1"], '--max-waiting needs an integer from 0 to 100000 (got "-1")'],
      [["--model", slug, "--prefix-reuse", "maybe"], '--prefix-reuse needs exact, any or off (got "maybe")'],
      [["--model", slug, "--bogus"], "unknown option --bogus"],
      [["--model", slug, "--cloud=yes"], "--cloud takes no value"],
      [["--model", slug, "extra"], "unexpected argument extra"],
      [["--model", slug, "--api-key", " , "], "--api-key: the key is empty"],
      [["--model", slug, "--ssl-keyfile", "key.pem"], "--ssl-keyfile needs --ssl-certfile too"],
      [["--model", slug, "--ssl-certfile", "cert.pem"], "--ssl-certfile needs --ssl-keyfile too"],
      [["--model", slug, "--ssl-keyfile", "/no/such/key.pem", "--ssl-certfile", "/no/such/cert.pem"], "--ssl-keyfile /no/such/key.pem: no such file"],
      [["--model", slug, "--cloud", "--api-key", "sk-local"], "--api-key is for local mode: with --cloud, keys come from `kiln keys create`"],
      [["--model", slug, "--log-level", "loud"], '--log-level needs fatal, error, warn, info, debug, trace or silent (got "loud")'],
      [
        ["--model", slug, "--allowed-origins", "app.example.com"],
        "--allowed-origins: 'app.example.com' is not an origin (scheme://host[:port], e.g. https://app.example.com) or *",
      ],
      [
        ["--model", slug, "--allowed-origins", "*,https://a.example/"],
        "--allowed-origins: 'https://a.example/' is not an origin: write it as https://a.example",
      ],
    ];
    for (const [argv, message] of cases) {
      const { io, out } = capture();
      expect(await serve.run(argv, io), argv.join(" ")).toBe(2);
      expect(out.stderr).toBe(`kiln serve: ${message}\n\n${serve.help}\n`);
    }
  });

  it("refuses a key and a certificate that do not belong together", async () => {
    const one = selfSignedCertificate();
    const other = selfSignedCertificate();
    const { io, out } = capture();
    expect(await serve.run(["--model", "smollm2-135m-instruct", "--ssl-keyfile", one.keyfile, "--ssl-certfile", other.certfile], io)).toBe(2);
    expect(out.stderr).toMatch(new RegExp(`^kiln serve: --ssl-keyfile ${one.keyfile} and --ssl-certfile ${other.certfile}: .*key values mismatch`));
  });

  it("checks a log level that comes from KILN_LOG_LEVEL", async () => {
    const saved = process.env.KILN_LOG_LEVEL;
    process.env.KILN_LOG_LEVEL = "loud";
    try {
      const { io, out } = capture();
      expect(await serve.run(["--model", "smollm2-135m-instruct"], io)).toBe(2);
      expect(out.stderr).toMatch(/^kiln serve: --log-level \(from \$KILN_LOG_LEVEL\) needs fatal, error/);
    } finally {
      if (saved === undefined) delete process.env.KILN_LOG_LEVEL;
      else process.env.KILN_LOG_LEVEL = saved;
    }
  });
});

describe("the console's operator actions", () => {
  it("are offered on a loopback address, or beyond it where keys are checked (cloud mode's admin keys, local mode's shared keys), never to an open server's network", () => {
    expect(offersOperatorActions("127.0.0.1", false)).toBe(true);
    expect(offersOperatorActions("0.0.0.0", false)).toBe(false);
    expect(offersOperatorActions("0.0.0.0", true)).toBe(true);
    expect(offersOperatorActions("127.0.0.1", true)).toBe(true);
  });
});
