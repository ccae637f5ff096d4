/**
 * HTTPS for end-to-end tests: a self-signed certificate for 127.0.0.1 and localhost made by the real
 * openssl (setup installs it), and a `fetch` that trusts it, for clients that take one (the `openai`
 * client's `fetch` option), since Node's own fetch trusts only the system's authorities.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";

export interface SelfSigned {
  keyfile: string;
  certfile: string;
  /** The certificate, as a client's trusted authority. */
  cert: Buffer;
}

/** A fresh key and self-signed certificate (a day long) in a temporary directory. */
export function selfSignedCertificate(): SelfSigned {
  const dir = mkdtempSync(join(tmpdir(), "kiln-tls-"));
  const keyfile = join(dir, "key.pem");
  const certfile = join(dir, "cert.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      keyfile,
      "-out",
      certfile,
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-addext",
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ],
    { stdio: "ignore" },
  );
  return { keyfile, certfile, cert: readFileSync(certfile) };
}

/** A `fetch` over node:https that trusts `ca` only; the body streams as it comes. */
export function fetchTrusting(ca: Buffer): typeof fetch {
  return (input, init) =>
    new Promise<Response>((resolve, reject) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      const headers = new Headers(init?.headers);
      const req = request(url, { method: init?.method ?? "GET", headers: Object.fromEntries(headers), ca, signal: init?.signal ?? undefined }, (res) => {
        const responseHeaders = new Headers();
        for (const [name, value] of Object.entries(res.headers))
          if (value !== undefined) responseHeaders.set(name, Array.isArray(value) ? value.join(", ") : value);
        const status = res.statusCode ?? 0;
        const body = status === 204 || status === 304 ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>);
        resolve(new Response(body, { status, statusText: res.statusMessage, headers: responseHeaders }));
      });
      req.on("error", reject);
      if (init?.body !== undefined && init.body !== null) req.end(typeof init.body === "string" ? init.body : Buffer.from(init.body as ArrayBuffer));
      else req.end();
    });
}
