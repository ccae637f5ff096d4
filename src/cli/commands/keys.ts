/** `kiln keys create|list|revoke`: API keys for `kiln serve --cloud`. */
import { formatNanoUsd, KeyStore, loadKeySecret, parseUsdToNano, type KeyListing, type KeyOptions, type KeyRecord } from "../../cloud/index.js";
import { hasModel } from "../../catalogue/catalogue.js";
import { databaseOption, keySecretFileOption, withCloudStore } from "../cloud-options.js";
import { defineCommand, type CommandIO } from "../command.js";
import { option, UsageError, type OptionValues } from "../options.js";

const SUBCOMMANDS = ["create", "list", "revoke"] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

const options = {
  name: option.string({ value: "<name>", description: "a label for the key (create needs it)" }),
  models: option.string({ value: "<slug,...>", description: "comma-separated model slugs the key may use (create); every model when absent" }),
  rpm: option.integer({ value: "N", min: 1, max: 1e9, description: "requests per minute the key may make (create); unlimited when absent" }),
  tpm: option.integer({
    value: "N",
    min: 1,
    max: 1e12,
    description: "tokens per minute (prompt + max completion at admission, corrected at the end) (create); unlimited when absent",
  }),
  maxConcurrent: option.integer({ value: "N", min: 1, max: 1e6, description: "requests in flight at once (create); unlimited when absent" }),
  budgetUsdPerDay: option.string({ value: "X", description: "spend per UTC day in USD, e.g. 0.50 (create); unlimited when absent" }),
  expires: option.string({ value: "<date>", description: "when the key stops working: an ISO 8601 date or time, UTC (create); never when absent" }),
  admin: option.flag({
    description: "make an admin key (create): besides what any key does, it may promote and roll back models from the web console",
  }),
  database: databaseOption,
  keySecretFile: keySecretFileOption,
  json: option.flag({ description: "print JSON (create: the key and its record; list: every key)" }),
};
type KeysOptions = OptionValues<typeof options>;

export default defineCommand({
  name: "keys",
  description: "Create, list and revoke API keys for cloud mode",
  intro: `API keys checked by \`kiln serve --cloud\`, kept in its database (--database) as keyed hashes
(HMAC-SHA256 with the server secret, which stays outside the database): the key itself is printed
once, by \`create\`, and cannot be shown again. Use the same --database and secret as the servers.

  create        make a key named --name, for the models in --models, with the given limits
                (--admin: an operator's key, which may also promote and roll back in the console)
  list          every key: id, key prefix, name, admin, models, limits, last use, spend today and in all
  revoke <id>   revoke a key by its id (key_…); every server refuses it within seconds`,
  positionals: ["create", "list", "revoke <id>"],
  options,
  async run({ options, positionals }, io) {
    const [sub, ...args] = positionals;
    if (!isSubcommand(sub)) throw new UsageError(sub ? `unknown subcommand ${sub}` : "which subcommand? (create, list or revoke)");
    checkArguments(sub, args, options);
    const spec = sub === "create" ? keySpec(options) : null;
    const secret = loadKeySecret({ file: options.keySecretFile });
    return withCloudStore(options.database, async (store) => {
      const keys = new KeyStore(store, secret, { cacheMs: 0 });
      if (sub === "create") return create(keys, options.name!, spec!, options.json, io);
      if (sub === "list") return list(keys, options.json, io);
      return revoke(keys, args[0], io);
    });
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

type KeySpec = KeyOptions;

/** What `create` makes from its options; usage errors for bad values. */
export function keySpec(
  options: Partial<Pick<KeysOptions, "models" | "rpm" | "tpm" | "maxConcurrent" | "budgetUsdPerDay" | "expires" | "admin">>,
  now = new Date(),
): KeySpec {
  return {
    models: allowedModels(options.models),
    limits: {
      requestsPerMinute: options.rpm ?? null,
      tokensPerMinute: options.tpm ?? null,
      maxConcurrent: options.maxConcurrent ?? null,
      dailyBudgetNanoUsd: dailyBudget(options.budgetUsdPerDay),
    },
    expiresAt: expiry(options.expires, now),
    admin: options.admin ?? false,
  };
}

/** The slugs of --models (null: every model); a usage error for an empty list or an unknown slug. */
function allowedModels(list: string | undefined): string[] | null {
  if (list === undefined) return null;
  const models = list
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (models.length === 0) throw new UsageError("--models needs at least one slug");
  const unknown = models.filter((m) => !hasModel(m));
  if (unknown.length > 0) throw new UsageError(`unknown model${unknown.length > 1 ? "s" : ""}: ${unknown.join(", ")} (see \`kiln models\`)`);
  return models;
}

function dailyBudget(usd: string | undefined): number | null {
  if (usd === undefined) return null;
  const nano = parseUsdToNano(usd);
  if (nano === null || nano > BigInt(Number.MAX_SAFE_INTEGER))
    throw new UsageError(`--budget-usd-per-day must be an amount in USD with at most 9 decimals, e.g. 0.50, not ${usd}`);
  return Number(nano);
}

function expiry(text: string | undefined, now: Date): string | null {
  if (text === undefined) return null;
  // A bare date is read as UTC midnight, as ISO 8601 says.
  const ms = /^\d{4}-\d{2}-\d{2}(T.*(Z|[+-]\d{2}:?\d{2}))?$/.test(text) ? Date.parse(text) : NaN;
  if (Number.isNaN(ms)) throw new UsageError(`--expires must be an ISO 8601 date or UTC time (2027-01-31, 2027-01-31T12:00:00Z), not ${text}`);
  if (ms <= now.getTime()) throw new UsageError(`--expires ${text} is already past`);
  return new Date(ms).toISOString();
}

async function create(keys: KeyStore, keyName: string, spec: KeySpec, json: boolean, io: CommandIO): Promise<number> {
  const { key, record } = await keys.create(keyName, spec);
  if (json) {
    io.stdout.write(`${JSON.stringify({ id: record.id, key, ...recordJson(record) })}\n`);
    return 0;
  }
  io.stdout.write(`${key}\n`);
  io.stderr.write(
    `created ${record.admin ? "admin key " : ""}${record.id} "${record.name}" for ${record.models ? record.models.join(", ") : "every model"}; the key above is shown only once\n`,
  );
  return 0;
}

async function list(keys: KeyStore, json: boolean, io: CommandIO): Promise<number> {
  const listed = await keys.list();
  io.stdout.write(json ? JSON.stringify(listed.map(listingJson), null, 2) + "\n" : table(listed));
  return 0;
}

async function revoke(keys: KeyStore, id: string, io: CommandIO): Promise<number> {
  if (await keys.revoke(id)) {
    io.stdout.write(`revoked ${id}\n`);
    return 0;
  }
  io.stderr.write(`kiln keys: no active key with id ${id}\n`);
  return 1;
}

function recordJson(k: KeyRecord) {
  return {
    name: k.name,
    prefix: k.prefix,
    admin: k.admin,
    models: k.models,
    limits: { ...k.limits, dailyBudgetUsd: k.limits.dailyBudgetNanoUsd === null ? null : formatNanoUsd(k.limits.dailyBudgetNanoUsd) },
    createdAt: k.createdAt,
    expiresAt: k.expiresAt,
    revokedAt: k.revokedAt,
  };
}

/** Money as decimal strings (exact), never floats. */
function listingJson(k: KeyListing) {
  return {
    id: k.id,
    ...recordJson(k),
    lastUsedAt: k.lastUsedAt,
    spentTodayNanoUsd: String(k.spentTodayNanoUsd),
    spentTotalNanoUsd: String(k.spentTotalNanoUsd),
  };
}

function table(keys: KeyListing[]): string {
  if (keys.length === 0) return "no keys (create one with `kiln keys create --name <name>`)\n";
  const limit = (v: number | null) => (v === null ? "-" : String(v));
  const rows = [
    ["ID", "KEY", "NAME", "ADMIN", "MODELS", "RPM", "TPM", "CONC", "BUDGET/DAY", "EXPIRES", "LAST USED", "SPENT TODAY", "SPENT", "REVOKED"],
    ...keys.map((k) => [
      k.id,
      `${k.prefix}…`,
      k.name,
      k.admin ? "yes" : "-",
      k.models ? k.models.join(",") : "*",
      limit(k.limits.requestsPerMinute),
      limit(k.limits.tokensPerMinute),
      limit(k.limits.maxConcurrent),
      k.limits.dailyBudgetNanoUsd === null ? "-" : `$${formatNanoUsd(k.limits.dailyBudgetNanoUsd)}`,
      k.expiresAt ?? "-",
      k.lastUsedAt ?? "-",
      `$${formatNanoUsd(k.spentTodayNanoUsd)}`,
      `$${formatNanoUsd(k.spentTotalNanoUsd)}`,
      k.revokedAt ?? "-",
    ]),
  ];
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  return rows.map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]))).join("  ")).join("\n") + "\n";
}
