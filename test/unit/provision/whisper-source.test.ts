/** Transcription models compile from CTranslate2 folders only: a pulled whisper.cpp ggml file is refused by name. */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { NotCompilableError, provisionArtifact } from "../../../src/provision/index.js";

const body = Buffer.from("ggml whisper stand-in");
let server: http.Server;
let endpoint: string;
let home: string;

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "kiln-whisper-source-"));
  server = http.createServer((req, res) => {
    if (req.url !== "/test/ggml/resolve/main/ggml-tiny.bin") return void res.writeHead(404).end("not found");
    res.writeHead(200, { "content-length": String(body.length), "content-type": "application/octet-stream" });
    res.end(req.method === "HEAD" ? undefined : body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(home, { recursive: true, force: true });
});

it("refuses a ggml (whisper.cpp) source with NotCompilableError", async () => {
  const sources = [{ type: "hub" as const, repo: "test/ggml", revision: "main", format: "ggml" as const, files: [{ path: "ggml-tiny.bin" }] }];
  const attempt = provisionArtifact("whisper-tiny", { home, pull: { sources, hubEndpoint: endpoint, hubToken: null, retries: 0 } });
  await expect(attempt).rejects.toThrow(NotCompilableError);
  await expect(provisionArtifact("whisper-tiny", { home, pull: { sources, hubEndpoint: endpoint, hubToken: null, retries: 0 } })).rejects.toThrow(
    /ggml format .*CTranslate2 Whisper conversions only/,
  );
});
