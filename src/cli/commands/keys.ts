/** `kiln keys create|list|revoke`: API keys for `kiln serve --cloud`. */
import { KeyStore, type StoredKey } from "../../api/index.js";
import { hasModel } from "../../catalogue/catalogue.js";
import { openDatabase } from "../../catalogue/db.js";
import { defineCommand, type CommandIO } from "../command.js";
import { option, UsageError, type OptionValues } from "../options.js";

const SUBCOMMANDS = ["create", "list", "revoke"] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

const options = {
  name: option.string({ value: "<name>", description: "a label for the key (create needs it)" }),
  models: option.string({ value: "<slug,...>", description: "comma-separated model slugs the key may use (create); every model when absent" }),
  json: option.flag({ description: "list as JSON" }),
};
type KeysOptions = OptionValues<typeof options>;

export default defineCommand({
  name: "keys",
  description: "Create, list and revoke API keys for cloud mode",
  intro: `API keys checked by \`kiln serve --cloud\`, kept in $KILN_HOME/kiln.sqlite as SHA-256 hashes: the
key itself is printed once, by \`create\`, and cannot be shown again.

  create        make a key named --name, for the models in --models
  list          every key: id, name, models, created and revoked times (never the key)
  revoke <id>   revoke a key by its id (key_…); requests with it get 401 from then on`,
  positionals: ["create", "list", "revoke <id>"],
  options,
  async run({ options, positionals }, io) {
    const [sub, ...args] = positionals;
    if (!isSubcommand(sub)) throw new UsageError(sub ? `unknown subcommand ${sub}` : "which subcommand? (create, list or revoke)");
    checkArguments(sub, args, options);
    const models = sub === "create" ? allowedModels(options.models) : null;
    const db = openDatabase();
    try {
      const store = new KeyStore(db);
      if (sub === "create") return create(store, options.name!, models, io);
      if (sub === "list") return list(store, options.json, io);
      return revoke(store, args[0], io);
    } finally {
      db.close();
    }
  },
});

function isSubcommand(word: string | undefined): word is Subcommand {
  return (SUBCOMMANDS as readonly (string | undefined)[]).includes(word);
}

function checkArguments(sub: Subcommand, args: string[], options: KeysOptions): void {
  if (sub === "create" && !options.name) throw new UsageError("create needs --name <name>");
  if (sub === "revoke") {
    if (args.length !== 1) throw new UsageError("revoke needs one key id");
  } else if (args.length > 0) {
    throw new UsageError(`unexpected argument ${args[0]}`);
  }
}

/** The slugs of --models (null: every model); a usage error for an empty list or an unknown slug. */
function allowedModels(list: string | undefined): string[] | null {
  if (list === undefined) return null;
  const models = list.split(",").map((s) => s.trim()).filter(Boolean);
  if (models.length === 0) throw new UsageError("--models needs at least one slug");
  const unknown = models.filter((m) => !hasModel(m));
  if (unknown.length > 0) throw new UsageError(`unknown model${unknown.length > 1 ? "s" : ""}: ${unknown.join(", ")} (see \`kiln models\`)`);
  return models;
}

function create(store: KeyStore, keyName: string, models: string[] | null, io: CommandIO): number {
  const { key, record } = store.create(keyName, models);
  io.stdout.write(`${key}\n`);
  io.stderr.write(`created ${record.id} "${record.name}" for ${record.models ? record.models.join(", ") : "every model"}; the key above is shown only once\n`);
  return 0;
}

function list(store: KeyStore, json: boolean, io: CommandIO): number {
  const keys = store.list();
  io.stdout.write(json ? JSON.stringify(keys, null, 2) + "\n" : table(keys));
  return 0;
}

function revoke(store: KeyStore, id: string, io: CommandIO): number {
  if (store.revoke(id)) {
    io.stdout.write(`revoked ${id}\n`);
    return 0;
  }
  io.stderr.write(`kiln keys: no active key with id ${id}\n`);
  return 1;
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

