/** `kiln serve`'s HTTPS options, as vLLM's server names them: a private key and its certificate chain, in PEM files. */
import { option, UsageError } from "./options.js";

export const sslKeyfileOption = option.string({
  value: "<file>",
  description: "serve HTTPS with this private key (PEM), beside --ssl-certfile; default plain HTTP",
});

export const sslCertfileOption = option.string({
  value: "<file>",
  description: "the certificate (PEM, the chain after it) that goes with --ssl-keyfile",
});

/** The key and certificate HTTPS serves with, read and checked to belong together; undefined for plain HTTP. A usage error says what is wrong. */
export async function tlsFrom(keyfile: string | undefined, certfile: string | undefined): Promise<{ key: Buffer; cert: Buffer } | undefined> {
  if (keyfile === undefined && certfile === undefined) return undefined;
  if (keyfile === undefined || certfile === undefined)
    throw new UsageError(
      `${keyfile === undefined ? "--ssl-certfile" : "--ssl-keyfile"} needs ${keyfile === undefined ? "--ssl-keyfile" : "--ssl-certfile"} too`,
    );
  const { readFileSync } = await import("node:fs");
  const { createSecureContext } = await import("node:tls");
  const read = (flag: string, file: string) => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new UsageError(`${flag} ${file}: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (err as Error).message}`);
    }
  };
  const tls = { key: read("--ssl-keyfile", keyfile), cert: read("--ssl-certfile", certfile) };
  try {
    createSecureContext(tls);
  } catch (err) {
    throw new UsageError(`--ssl-keyfile ${keyfile} and --ssl-certfile ${certfile}: ${(err as Error).message}`);
  }
  return tls;
}
