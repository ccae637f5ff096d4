/**
 * The server secret that API keys are hashed with (HMAC-SHA256). It is kept outside the database,
 * so a stolen database holds only keyed hashes that no one can check a guess against. Every replica
 * of a fleet must use the same secret.
 *
 * Where it comes from, first found wins: env `KILN_KEY_SECRET`; the file named by
 * `--key-secret-file`; `$KILN_HOME/key-secret`, created (random, mode 0600) at first use.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, constants, mkdirSync, openSync, readFileSync, statSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";
import { ensurePrivateHome, kilnHome } from "../../catalogue/paths.js";

/** File name of the generated secret in KILN_HOME. */
export const KEY_SECRET_FILE = "key-secret";

/** A secret shorter than this (bytes) is refused: it could be guessed. */
const MIN_SECRET_BYTES = 16;

export interface KeySecretOptions {
  /** `--key-secret-file`: a file holding the secret (its text, trimmed). */
  file?: string;
  env?: NodeJS.ProcessEnv;
}

/** The secret as bytes; throws with a message for the operator when it is missing or too short. */
export function loadKeySecret(options: KeySecretOptions = {}): Buffer {
  const env = options.env ?? process.env;
  if (env.KILN_KEY_SECRET !== undefined && env.KILN_KEY_SECRET !== "") return checked(env.KILN_KEY_SECRET.trim(), "KILN_KEY_SECRET");
  if (options.file) return checked(readFileSync(options.file, "utf8").trim(), options.file);
  // KILN_HOME is made (or tightened to) the owner's only first: the secret is often the first thing kiln writes there (`kiln keys create`).
  const path = join(ensurePrivateHome(kilnHome(env)), KEY_SECRET_FILE);
  return checked(readOrCreate(path), path);
}

function checked(text: string, where: string): Buffer {
  const secret = Buffer.from(text, "utf8");
  if (secret.length < MIN_SECRET_BYTES) throw new Error(`the key secret in ${where} is shorter than ${MIN_SECRET_BYTES} bytes`);
  return secret;
}

/** Reads the secret file, or creates it (exclusively, so two processes starting at once agree on one secret). */
function readOrCreate(path: string): string {
  try {
    return readFileSync(path, "utf8").trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  mkdirSync(dirname(path), { recursive: true });
  try {
    const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    try {
      writeSync(fd, `${randomBytes(32).toString("base64url")}\n`);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  if ((statSync(path).mode & 0o077) !== 0) chmodSync(path, 0o600);
  return readFileSync(path, "utf8").trim();
}
