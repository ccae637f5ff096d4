/** `kiln keys create|list|revoke`: API keys for `kiln serve --cloud`. */
import { KeyStore, type StoredKey } from "../../api/index.js";
import { hasModel } from "../../catalogue/catalogue.js";
import { openDatabase } from "../../catalogue/db.js";
import type { CommandIO } from "../command.js";

export const name = "keys";
export const description = "Create, list and revoke API keys for cloud mode";
export const usage = `Usage: kiln keys create --name <name> [--models <slug>,<slug>...]
       kiln keys list [--json]
       kiln keys revoke <id>

API keys checked by \`kiln serve --cloud\`, kept in $KILN_HOME/kiln.sqlite as SHA-256 hashes: the
key itself is printed once, by \`create\`, and cannot be shown again.

Commands:
  create    make a key; --models limits it to those models (default: every model)
  list      every key: id, name, models, created and revoked times (never the key)
  revoke    revoke a key by its id (key_…); requests with it get 401 from then on

Options:
  --name <name>       a label for the key (required by create)
  --models <a,b,...>  model slugs the key may use
  --json              list as JSON
  -h, --help          show this help`;

export async function run(argv: string[], io: CommandIO = process): Promise<number> {
  if (argv.includes("-h") || argv.includes("--help")) {
    io.stdout.write(usage + "\n");
    return 0;
  }
  const [sub, ...rest] = argv;
  const fail = (message: string) => {
    io.stderr.write(`kiln keys: ${message}\n${usage}\n`);
    return 2;
  };
  if (sub !== "create" && sub !== "list" && sub !== "revoke") return fail(sub ? `unknown subcommand ${sub}` : "which subcommand? (create, list or revoke)");

  let keyName: string | null = null;
  let models: string[] | null = null;
  let json = false;
  const positional: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    if (arg === "--name") keyName = rest[++i] ?? "";
    else if (arg === "--models") models = (rest[++i] ?? "").split(",").map((s) => s.trim()).filter(Boolean);
    else if (arg === "--json") json = true;
    else if (arg.startsWith("-")) return fail(`unknown option ${arg}`);
    else positional.push(arg);
  }

  if (sub === "create") {
    if (!keyName) return fail("create needs --name <name>");
    if (models !== null) {
      if (models.length === 0) return fail("--models needs at least one slug");
      const unknown = models.filter((m) => !hasModel(m));
      if (unknown.length > 0) return fail(`unknown model${unknown.length > 1 ? "s" : ""}: ${unknown.join(", ")} (see \`kiln models\`)`);
    }
    if (positional.length > 0) return fail(`unexpected argument ${positional[0]}`);
  } else if (sub === "revoke" && positional.length !== 1) {
    return fail("revoke needs one key id");
  } else if (sub === "list" && positional.length > 0) {
    return fail(`unexpected argument ${positional[0]}`);
  }

  const db = openDatabase();
  try {
    const store = new KeyStore(db);
    if (sub === "create") {
      const { key, record } = store.create(keyName!, models);
      io.stdout.write(`${key}\n`);
      io.stderr.write(`created ${record.id} "${record.name}" for ${record.models ? record.models.join(", ") : "every model"}; the key above is shown only once\n`);
      return 0;
    }
    if (sub === "list") {
      const keys = store.list();
      io.stdout.write(json ? JSON.stringify(keys, null, 2) + "\n" : table(keys));
      return 0;
    }
    const id = positional[0];
    if (store.revoke(id)) {
      io.stdout.write(`revoked ${id}\n`);
      return 0;
    }
    io.stderr.write(`kiln keys: no active key with id ${id}\n`);
    return 1;
  } finally {
    db.close();
  }
}

function table(keys: StoredKey[]): string {
  if (keys.length === 0) return "no keys (create one with `kiln keys create --name <name>`)\n";
  const rows = [
    ["ID", "NAME", "MODELS", "CREATED", "REVOKED"],
    ...keys.map((k) => [k.id, k.name, k.models ? k.models.join(",") : "*", k.createdAt, k.revokedAt ?? "-"]),
  ];
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  return rows.map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]))).join("  ")).join("\n") + "\n";
}

export default { name, description, usage, run };
