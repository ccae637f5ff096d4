/**
 * The hub downloader against a local server that serves files the way the hub does: the resolve
 * URL answers 302 to a CDN (a second server, so another host) with X-Linked-Etag / X-Linked-Size;
 * the CDN honours Range with 206 + Content-Range, and HEAD.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { deflateRawSync } from "node:zlib";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { downloadHubFile, hubEndpoint, resolveUrl } from "../../../src/catalogue/pull/hub.js";
import { PINS_FILE, pullModel, PullError, type PullProgress } from "../../../src/catalogue/pull/index.js";
import { createProgressPrinter } from "../../../src/catalogue/pull/progress.js";
import { RECORD_FILE } from "../../../src/catalogue/pull/store.js";
import { ZipReader } from "../../../src/catalogue/pull/zip.js";
import type { HubSource } from "../../../src/catalogue/types.js";

interface Served {
  body: Buffer;
  /** The CDN drops the connection after sending this many bytes, for the first `dropTimes` GETs. */
  dropAfter?: number;
  dropTimes?: number;
  /** Serve this instead of the body (same length), while advertising the body's hash. */
  corruptBody?: Buffer;
  /** Ignore Range and always answer 200 with the whole body. */
  ignoreRange?: boolean;
  /** Serve directly from the resolve URL (no redirect), with a git-blob ETag, like a non-LFS file. */
  nonLfs?: boolean;
}

interface Logged {
  server: "hub" | "cdn";
  method: string;
  url: string;
  range?: string;
  authorization?: string;
}

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const gitOid = (b: Buffer) => createHash("sha1").update(`blob ${b.length}\0`).update(b).digest("hex");

let hub: http.Server;
let cdn: http.Server;
let hubUrl: string;
let cdnUrl: string;
const files = new Map<string, Served>(); // key: "<repo>/<path>"
const log: Logged[] = [];
const gets = new Map<string, number>();

function sendBody(req: http.IncomingMessage, res: http.ServerResponse, served: Served, key: string): void {
  const body = served.corruptBody ?? served.body;
  const total = body.length;
  let start = 0;
  const range = req.headers.range;
  if (range && !served.ignoreRange) {
    const m = /^bytes=(\d+)-$/.exec(range);
    start = m ? Number(m[1]) : 0;
    if (start >= total) {
      res.writeHead(416, { "content-range": `bytes */${total}` });
      res.end();
      return;
    }
    res.writeHead(206, {
      "content-length": String(total - start),
      "content-range": `bytes ${start}-${total - 1}/${total}`,
      "accept-ranges": "bytes",
      "content-type": "application/octet-stream",
    });
  } else {
    res.writeHead(200, {
      "content-length": String(total),
      "accept-ranges": "bytes",
      "content-type": "application/octet-stream",
      etag: served.nonLfs ? `"${gitOid(served.body)}"` : `"cdn-${key.length}"`,
    });
  }
  if (req.method === "HEAD") {
    res.end();
    return;
  }
  const n = (gets.get(key) ?? 0) + 1;
  gets.set(key, n);
  if (served.dropAfter !== undefined && n <= (served.dropTimes ?? 1) && start + served.dropAfter < total) {
    res.write(body.subarray(start, start + served.dropAfter), () => {
      // Let the bytes leave, then cut the connection in the middle of the body.
      setTimeout(() => res.socket?.destroy(), 20);
    });
    return;
  }
  res.end(body.subarray(start));
}

beforeAll(async () => {
  cdn = http.createServer((req, res) => {
    log.push({ server: "cdn", method: req.method!, url: req.url!, range: req.headers.range, authorization: req.headers.authorization });
    const key = decodeURIComponent(req.url!.replace(/^\/blobs\//, ""));
    const served = files.get(key);
    if (!served) {
      res.writeHead(404).end();
      return;
    }
    sendBody(req, res, served, key);
  });
  hub = http.createServer((req, res) => {
    log.push({ server: "hub", method: req.method!, url: req.url!, range: req.headers.range, authorization: req.headers.authorization });
    const m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(req.url!);
    if (!m) {
      res.writeHead(404).end();
      return;
    }
    const repo = m[1]!;
    const path = m[3]!.split("/").map(decodeURIComponent).join("/");
    const key = `${repo}/${path}`;
    const served = files.get(key);
    if (!served) {
      res.writeHead(404, { "x-error-code": "EntryNotFound", "x-error-message": "Entry not found" });
      res.end("Entry not found");
      return;
    }
    if (served.nonLfs) {
      sendBody(req, res, served, key);
      return;
    }
    res.writeHead(302, {
      location: `${cdnUrl}/blobs/${encodeURIComponent(key)}`,
      "x-linked-etag": `"${sha256(served.body)}"`,
      etag: `"${sha256(served.body)}"`,
      "x-linked-size": String(served.body.length),
      "x-repo-commit": "0123456789abcdef0123456789abcdef01234567",
    });
    res.end();
  });
  await new Promise<void>((r) => hub.listen(0, "127.0.0.1", r));
  await new Promise<void>((r) => cdn.listen(0, "127.0.0.1", r));
  hubUrl = `http://127.0.0.1:${(hub.address() as AddressInfo).port}`;
  cdnUrl = `http://127.0.0.1:${(cdn.address() as AddressInfo).port}`;
});

afterAll(async () => {
  hub.closeAllConnections();
  cdn.closeAllConnections();
  await new Promise((r) => hub.close(r));
  await new Promise((r) => cdn.close(r));
});

let home: string;
beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), "kiln-hub-"));
  files.clear();
  log.length = 0;
  gets.clear();
});
afterEach(() => {
  rmSync(home, { recursive: true, force: true });
});

function source(repo: string, paths: string[], extra: Partial<HubSource> = {}): HubSource {
  return { type: "hub", repo, revision: "main", format: "gguf", files: paths.map((path) => ({ path })), ...extra };
}

const fast = { retryDelayMs: 5, hubToken: null as string | null };

describe("hub endpoint", () => {
  it("prefers KILN_HUB_ENDPOINT, then HF_ENDPOINT, then the public hub", () => {
    expect(hubEndpoint({ KILN_HUB_ENDPOINT: "http://a/", HF_ENDPOINT: "http://b" })).toBe("http://a");
    expect(hubEndpoint({ HF_ENDPOINT: "http://b" })).toBe("http://b");
    expect(hubEndpoint({})).toMatch(/^https:\/\//);
    expect(resolveUrl("http://h", "org/repo", "main", "dir/a b.gguf")).toBe("http://h/org/repo/resolve/main/dir/a%20b.gguf");
  });
});

describe("hub downloads", () => {
  it("downloads a file, follows the redirect and verifies it against X-Linked-Etag", async () => {
    const body = randomBytes(300_000);
    files.set("org/model-GGUF/model.Q4.gguf", { body });
    const progress: PullProgress[] = [];
    const pulled = await pullModel("test-model", {
      home,
      hubEndpoint: hubUrl,
      sources: [source("org/model-GGUF", ["model.Q4.gguf"])],
      onProgress: (p) => progress.push(p),
      ...fast,
    });
    expect(pulled.source).toBe("hub org/model-GGUF");
    expect(pulled.files).toEqual([{ path: "model.Q4.gguf", sha256: sha256(body), bytes: body.length }]);
    expect(pulled.dir).toBe(join(home, "models", "test-model"));
    expect(readFileSync(join(pulled.dir, "model.Q4.gguf")).equals(body)).toBe(true);
    expect(readdirSync(pulled.dir).sort()).toEqual(["model.Q4.gguf", RECORD_FILE, PINS_FILE]);
    const record = JSON.parse(readFileSync(join(pulled.dir, RECORD_FILE), "utf8"));
    expect(record.files[0].sha256).toBe(sha256(body));
    expect(log.map((l) => `${l.server} ${l.method}`)).toEqual(["hub GET", "cdn GET"]);
    const last = progress[progress.length - 1]!;
    expect(last).toMatchObject({ slug: "test-model", file: "model.Q4.gguf", bytesDone: body.length, bytesTotal: body.length });
  });

  it("sends the token to the hub but not to the CDN on another host", async () => {
    const body = randomBytes(1000);
    files.set("org/gated/w.gguf", { body });
    await pullModel("gated", { home, hubEndpoint: hubUrl, sources: [source("org/gated", ["w.gguf"])], ...fast, hubToken: "hf_secret" });
    expect(log.find((l) => l.server === "hub")!.authorization).toBe("Bearer hf_secret");
    expect(log.find((l) => l.server === "cdn")!.authorization).toBeUndefined();
  });

  it("resumes with a Range request when the connection drops in the middle of the body", async () => {
    const body = randomBytes(1_000_000);
    files.set("org/flaky/big.gguf", { body, dropAfter: 300_000, dropTimes: 2 });
    const dest = join(home, "big.gguf");
    const result = await downloadHubFile({ repo: "org/flaky", revision: "main", path: "big.gguf", dest }, { endpoint: hubUrl, token: null, retryDelayMs: 5 });
    expect(result.sha256).toBe(sha256(body));
    expect(result.bytes).toBe(body.length);
    expect(result.resumed).toBe(true);
    expect(result.attempts).toBe(3);
    expect(readFileSync(dest).equals(body)).toBe(true);
    expect(existsSync(`${dest}.part`)).toBe(false);
    // Cut at 300000, resumed there and cut again at 600000, resumed there and finished.
    const ranges = log.filter((l) => l.server === "cdn").map((l) => l.range);
    expect(ranges).toEqual([undefined, "bytes=300000-", "bytes=600000-"]);
  });

  it("resumes a .part left by an earlier run, and starts over when the server ignores Range", async () => {
    const body = randomBytes(200_000);
    files.set("org/resume/a.gguf", { body });
    const dest = join(home, "a.gguf");
    writeFileSync(`${dest}.part`, body.subarray(0, 123_456));
    const resumed = await downloadHubFile({ repo: "org/resume", revision: "main", path: "a.gguf", dest }, { endpoint: hubUrl, token: null, retryDelayMs: 5 });
    expect(resumed.resumed).toBe(true);
    expect(resumed.sha256).toBe(sha256(body));
    expect(log.find((l) => l.server === "cdn")!.range).toBe("bytes=123456-");

    files.set("org/resume/b.gguf", { body, ignoreRange: true });
    const dest2 = join(home, "b.gguf");
    writeFileSync(`${dest2}.part`, Buffer.alloc(5000, 7)); // garbage that must not survive
    const restarted = await downloadHubFile(
      { repo: "org/resume", revision: "main", path: "b.gguf", dest: dest2 },
      { endpoint: hubUrl, token: null, retryDelayMs: 5 },
    );
    expect(restarted.resumed).toBe(false);
    expect(readFileSync(dest2).equals(body)).toBe(true);
  });

  it("rejects a corrupted body with a sha256 mismatch and leaves no file behind", async () => {
    const body = randomBytes(50_000);
    const corrupt = Buffer.from(body);
    corrupt[1234] = (corrupt[1234]! + 1) & 0xff;
    files.set("org/bad/w.gguf", { body, corruptBody: corrupt });
    const err = await pullModel("corrupt", {
      home,
      hubEndpoint: hubUrl,
      sources: [source("org/bad", ["w.gguf"])],
      ...fast,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PullError);
    const message = (err as Error).message;
    expect(message).toMatch(/^could not pull corrupt: hub org\/bad: sha256 mismatch for w\.gguf: expected [0-9a-f]{64}, got [0-9a-f]{64}$/);
    expect(message).toContain(sha256(body));
    expect(message).toContain(sha256(corrupt));
    const dir = join(home, "models", "corrupt");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("checks a catalogue sha256 over the hub's", async () => {
    const body = randomBytes(10_000);
    files.set("org/pinned/w.gguf", { body });
    const wrong = "0".repeat(64);
    const err = await pullModel("pinned", {
      home,
      hubEndpoint: hubUrl,
      sources: [{ ...source("org/pinned", []), files: [{ path: "w.gguf", sha256: wrong }] }],
      ...fast,
    }).catch((e: unknown) => e);
    expect((err as Error).message).toContain(`expected ${wrong}`);
  });

  it("verifies a non-LFS file (served directly) by its git blob id", async () => {
    const body = Buffer.from(JSON.stringify({ model_type: "whisper", d_model: 384 }));
    files.set("org/ct2/config.json", { body, nonLfs: true });
    const pulled = await pullModel("ct2", {
      home,
      hubEndpoint: hubUrl,
      sources: [source("org/ct2", ["config.json"], { format: "ctranslate2" })],
      ...fast,
    });
    expect(pulled.files[0]!.sha256).toBe(sha256(body));
    expect(log.every((l) => l.server === "hub")).toBe(true);
  });

  it("falls to the next source after a 404, and lists every failure in one line", async () => {
    const body = randomBytes(4096);
    files.set("org/second/w.gguf", { body });
    const pulled = await pullModel("fallback", {
      home,
      hubEndpoint: hubUrl,
      sources: [source("org/first", ["w.gguf"]), source("org/second", ["w.gguf"])],
      ...fast,
    });
    expect(pulled.source).toBe("hub org/second");
    expect(pulled.files[0]!.sha256).toBe(sha256(body));

    const err = await pullModel("nowhere", {
      home,
      hubEndpoint: hubUrl,
      sources: [
        source("org/missing", ["w.gguf"]),
        source("org/also-missing", ["x.gguf"], { revision: "v2" }),
        // A source on a port where nothing listens.
      ],
      ...fast,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PullError);
    const message = (err as Error).message;
    expect(message).not.toContain("\n");
    expect(message).toBe(
      "could not pull nowhere: hub org/missing: w.gguf: HTTP 404 (Entry not found); " + "hub org/also-missing@v2: x.gguf: HTTP 404 (Entry not found)",
    );
    expect((err as PullError).attempts).toHaveLength(2);
  });

  it("reports a refused connection without retrying it, then moves on", async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const deadPort = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const started = Date.now();
    const err = await pullModel("offline", {
      home,
      hubEndpoint: `http://127.0.0.1:${deadPort}`,
      sources: [source("org/any", ["w.gguf"])],
      retryDelayMs: 2000,
      hubToken: null,
    }).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(1500);
    expect((err as Error).message).toMatch(/^could not pull offline: hub org\/any: connect ECONNREFUSED 127\.0\.0\.1:\d+$/);
  });

  it("does not fetch an already-downloaded file again", async () => {
    const body = randomBytes(20_000);
    files.set("org/cached/w.gguf", { body });
    const opts = { home, hubEndpoint: hubUrl, sources: [source("org/cached", ["w.gguf"])], ...fast };
    const first = await pullModel("cached", opts);
    expect(first.cached).toBe(false);
    log.length = 0;
    const second = await pullModel("cached", opts);
    expect(second.cached).toBe(true);
    expect(second.files).toEqual(first.files);
    expect(log).toEqual([]);

    // Without pulled.json the file is checked against the digest pinned at its first pull: no request.
    rmSync(join(home, "models", "cached", RECORD_FILE));
    const third = await pullModel("cached", opts);
    expect(third.files).toEqual(first.files);
    expect(log).toEqual([]);

    // Without the pin either, it is checked against the hub's hash with a HEAD, not downloaded.
    rmSync(join(home, "models", "cached", RECORD_FILE));
    rmSync(join(home, "models", "cached", PINS_FILE));
    const fourthCheck = await pullModel("cached", opts);
    expect(fourthCheck.files).toEqual(first.files);
    expect(log.map((l) => `${l.server} ${l.method}`)).toEqual(["hub HEAD"]);

    // A file changed on disk is noticed (size/mtime) and fetched again.
    writeFileSync(join(home, "models", "cached", "w.gguf"), Buffer.alloc(100));
    log.length = 0;
    const fourth = await pullModel("cached", opts);
    expect(fourth.files[0]!.sha256).toBe(sha256(body));
    expect(log.some((l) => l.server === "cdn" && l.method === "GET")).toBe(true);
  });

  it("pins a file without a published digest at its first pull and refuses a changed one unless accepted", async () => {
    const first = randomBytes(30_000);
    files.set("org/tofu/w.gguf", { body: first });
    const opts = { home, hubEndpoint: hubUrl, sources: [source("org/tofu", ["w.gguf"])], ...fast };
    await pullModel("tofu", opts);
    const pins = JSON.parse(readFileSync(join(home, "models", "tofu", PINS_FILE), "utf8"));
    expect(pins.files["org/tofu/w.gguf"]).toMatchObject({ sha256: sha256(first), bytes: first.length, revision: "main" });

    // Upstream replaces the file; the local copy is lost: the new one is refused before it is downloaded.
    const second = randomBytes(30_000);
    files.set("org/tofu/w.gguf", { body: second });
    rmSync(join(home, "models", "tofu", "w.gguf"));
    log.length = 0;
    const err = await pullModel("tofu", opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PullError);
    const message = (err as Error).message;
    expect(message).toContain("w.gguf");
    expect(message).toContain(sha256(first));
    expect(message).toContain(sha256(second));
    expect(message).toContain("--accept-changed");
    expect(log.some((l) => l.server === "cdn" && l.method === "GET")).toBe(false);
    expect(existsSync(join(home, "models", "tofu", "w.gguf"))).toBe(false);

    // A hub that gives no digest up front: the body shows the change, and it is refused all the same.
    files.set("org/tofu/w.gguf", { body: second, nonLfs: true });
    const again = await pullModel("tofu", opts).catch((e: unknown) => e);
    expect((again as Error).message).toContain(`now serves sha256 ${sha256(second)}`);

    // The operator accepts it: the new file is taken and pinned.
    files.set("org/tofu/w.gguf", { body: second });
    const accepted = await pullModel("tofu", { ...opts, acceptChanged: true });
    expect(accepted.files[0]!.sha256).toBe(sha256(second));
    const repinned = JSON.parse(readFileSync(join(home, "models", "tofu", PINS_FILE), "utf8"));
    expect(repinned.files["org/tofu/w.gguf"].sha256).toBe(sha256(second));
    expect((await pullModel("tofu", opts)).cached).toBe(true);
  });

  it("never lets --accept-changed override a digest the catalogue publishes", async () => {
    const body = randomBytes(10_000);
    files.set("org/pinned2/w.gguf", { body });
    const err = await pullModel("pinned2", {
      home,
      hubEndpoint: hubUrl,
      sources: [source("org/pinned2", [], { files: [{ path: "w.gguf", sha256: "0".repeat(64) }] })],
      acceptChanged: true,
      ...fast,
    }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/sha256 mismatch for w\.gguf/);
    expect(existsSync(join(home, "models", "pinned2", PINS_FILE))).toBe(false);
  });

  it("aborts when the signal fires", async () => {
    const body = randomBytes(500_000);
    files.set("org/slow/w.gguf", { body, dropAfter: 100_000, dropTimes: 100 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const err = await pullModel("aborted", {
      home,
      hubEndpoint: hubUrl,
      sources: [source("org/slow", ["w.gguf"])],
      signal: controller.signal,
      retryDelayMs: 1000,
      hubToken: null,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(PullError);
  });
});

describe("progress printer", () => {
  const sample = (done: number): PullProgress => ({
    slug: "m",
    source: "hub o/r",
    file: "w.gguf",
    phase: "download",
    bytesDone: done,
    bytesTotal: 1000,
    bytesPerSecond: 100,
  });

  it("draws a bar in place on a TTY", () => {
    let out = "";
    const p = createProgressPrinter({ write: (s: string) => (out += s), isTTY: true, columns: 100 });
    p(sample(500));
    p(sample(1000));
    expect(out).toContain("\r");
    expect(out).toContain("50%");
    expect(out).toMatch(/100%.*\n$/);
  });

  it("prints occasional plain lines otherwise", () => {
    const lines: string[] = [];
    const p = createProgressPrinter({ write: (s: string) => lines.push(s), isTTY: false });
    for (let i = 0; i <= 1000; i += 10) p(sample(i));
    expect(lines.length).toBeLessThanOrEqual(6);
    expect(lines.every((l) => !l.includes("\r") && l.endsWith("\n"))).toBe(true);
    expect(lines[lines.length - 1]).toContain("(100%)");
  });
});

describe("zip reader", () => {
  /** A minimal zip writer: stored and deflated members. */
  function makeZip(members: { name: string; data: Buffer; deflate: boolean }[]): Buffer {
    const locals: Buffer[] = [];
    const centrals: Buffer[] = [];
    let offset = 0;
    const crcTable = Array.from({ length: 256 }, (_, n) => {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      return c >>> 0;
    });
    const crc32 = (b: Buffer) => {
      let c = 0xffffffff;
      for (const byte of b) c = crcTable[(c ^ byte) & 0xff]! ^ (c >>> 8);
      return (c ^ 0xffffffff) >>> 0;
    };
    for (const m of members) {
      const name = Buffer.from(m.name);
      const payload = m.deflate ? deflateRawSync(m.data) : m.data;
      const crc = crc32(m.data);
      const local = Buffer.alloc(30);
      local.writeUInt32LE(0x04034b50, 0);
      local.writeUInt16LE(20, 4);
      local.writeUInt16LE(m.deflate ? 8 : 0, 8);
      local.writeUInt32LE(crc, 14);
      local.writeUInt32LE(payload.length, 18);
      local.writeUInt32LE(m.data.length, 22);
      local.writeUInt16LE(name.length, 26);
      locals.push(local, name, payload);
      const central = Buffer.alloc(46);
      central.writeUInt32LE(0x02014b50, 0);
      central.writeUInt16LE(20, 4);
      central.writeUInt16LE(20, 6);
      central.writeUInt16LE(m.deflate ? 8 : 0, 10);
      central.writeUInt32LE(crc, 16);
      central.writeUInt32LE(payload.length, 20);
      central.writeUInt32LE(m.data.length, 24);
      central.writeUInt16LE(name.length, 28);
      central.writeUInt32LE(offset, 42);
      centrals.push(central, name);
      offset += 30 + name.length + payload.length;
    }
    const cd = Buffer.concat(centrals);
    const eocd = Buffer.alloc(22);
    eocd.writeUInt32LE(0x06054b50, 0);
    eocd.writeUInt16LE(members.length, 8);
    eocd.writeUInt16LE(members.length, 10);
    eocd.writeUInt32LE(cd.length, 12);
    eocd.writeUInt32LE(offset, 16);
    return Buffer.concat([...locals, cd, eocd]);
  }

  it("reads stored and deflated members and streams them to disk", async () => {
    const big = Buffer.concat([randomBytes(100_000), Buffer.alloc(200_000, 1)]);
    const zipPath = join(home, "t.whl");
    writeFileSync(
      zipPath,
      makeZip([
        { name: "pkg/__init__.py", data: Buffer.from("x = 1\n"), deflate: false },
        { name: "pkg/model.bin", data: big, deflate: true },
        { name: "pkg/empty", data: Buffer.alloc(0), deflate: false },
      ]),
    );
    const zip = await ZipReader.open(zipPath);
    try {
      expect(zip.entries.map((e) => e.name)).toEqual(["pkg/__init__.py", "pkg/model.bin", "pkg/empty"]);
      expect((await zip.read(zip.get("pkg/__init__.py")!)).toString()).toBe("x = 1\n");
      expect((await zip.read(zip.get("pkg/empty")!)).length).toBe(0);
      mkdirSync(join(home, "out"));
      const got = await zip.extract(zip.get("pkg/model.bin")!, join(home, "out", "model.bin"));
      expect(got).toEqual({ sha256: sha256(big), bytes: big.length });
      expect(readFileSync(join(home, "out", "model.bin")).equals(big)).toBe(true);
    } finally {
      await zip.close();
    }
  });

  it("refuses a file that is not a zip", async () => {
    const p = join(home, "not.zip");
    writeFileSync(p, randomBytes(1000));
    await expect(ZipReader.open(p)).rejects.toThrow(/not a zip/);
  });
});
