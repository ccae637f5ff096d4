/**
 * A split GGUF from the hub end to end: a local server serves three shards the way the hub does;
 * provisioning pulls them as a set, compiles the first shard with the rest (one artifact naming every
 * shard), reuses it, and refuses to compile once a later shard changed after the pull.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HubSource } from "../../../src/catalogue/types.js";
import { provisionArtifact, type ProvisionOptions } from "../../../src/provision/index.js";
import { splitGguf } from "../../fixtures/gguf/split-gguf.js";
import { writeTinyGguf } from "./tiny-gguf.js";

const SLUG = "mixtral-8x22b-instruct"; // a catalogue model whose source is split; the sources below replace its own
const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

const shards = new Map<string, Buffer>();
let server: http.Server;
let endpoint: string;
let home: string;
let scratch: string;

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), "kiln-split-src-"));
  await writeTinyGguf(join(scratch, "tiny.gguf"), 3);
  for (const path of await splitGguf(join(scratch, "tiny.gguf"), join(scratch, "tiny.Q8_0"), 3)) shards.set(basename(path), readFileSync(path));
  server = http.createServer((req, res) => {
    const body = shards.get(decodeURIComponent(req.url!.replace(/^\/test\/split\/resolve\/main\//, "")));
    if (!body) return void res.writeHead(404).end("not found");
    res.writeHead(200, { "content-length": String(body.length), "x-linked-etag": `"${sha256(body)}"`, "x-linked-size": String(body.length) });
    res.end(req.method === "HEAD" ? undefined : body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  home = mkdtempSync(join(tmpdir(), "kiln-split-home-"));
});
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(home, { recursive: true, force: true });
  rmSync(scratch, { recursive: true, force: true });
});

function options(): ProvisionOptions {
  const source: HubSource = { type: "hub", repo: "test/split", revision: "main", format: "gguf", files: [...shards.keys()].map((path) => ({ path })) };
  return { home, pull: { sources: [source], hubEndpoint: endpoint, hubToken: null, retries: 0 } };
}

describe("a split model from the hub", () => {
  it("is pulled as a set, compiled as one model, reused, and refused once a later shard changed", async () => {
    const first = await provisionArtifact(SLUG, options());
    expect(first.reused).toBe(false);
    const names = [...shards.keys()];
    expect(names[0]).toBe("tiny.Q8_0-00001-of-00003.gguf");
    const lines = names.map((n) => `${n} ${sha256(shards.get(n)!)}\n`).join("");
    expect(first.manifest.source).toMatchObject({
      file: names[0],
      sha256: createHash("sha256").update(lines).digest("hex"),
      bytes: [...shards.values()].reduce((n, b) => n + b.length, 0),
    });
    for (const n of names) expect(first.manifest.choices.find((c) => c.what === "source")?.choice).toContain(`${n} (`);

    const again = await provisionArtifact(SLUG, options());
    expect(again).toMatchObject({ reused: true, dir: first.dir });

    // The last shard changed in place (mtime put back) and the hub no longer serves it: refused, not compiled.
    const last = join(home, "models", SLUG, names[2]);
    const st = statSync(last);
    const bytes = readFileSync(last);
    bytes[bytes.length - 100] ^= 0xff;
    writeFileSync(last, bytes);
    utimesSync(last, st.atimeMs / 1000, st.mtimeMs / 1000);
    shards.delete(names[2]);
    const err = await provisionArtifact(SLUG, {
      ...options(),
      pull: { ...options().pull, sources: [{ type: "hub", repo: "test/split", revision: "main", format: "gguf", files: names.map((path) => ({ path })) }] },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain(names[2]);
  }, 60_000);
});
