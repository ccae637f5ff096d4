/**
 * Exposure: a server reachable beyond loopback in local mode (any key accepted) is warned about,
 * at start and in /health; in cloud mode /metrics asks for a key like /v1 does.
 */
import { describe, expect, it } from "vitest";
import { sqliteKeyStore } from "../cloud/keys-support.js";
import { exposureWarning, isLoopbackHost } from "../../../src/api/exposure.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { fakeApp } from "./fake-model.js";

describe("which hosts are loopback", () => {
  it("counts 127.0.0.0/8, ::1 and localhost in their spellings, and nothing else", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"]) {
      expect(isLoopbackHost(host), host).toBe(true);
    }
    for (const host of ["0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "128.0.0.1", "::2", "fe80::1", "::ffff:10.0.0.1", "example.com", "my-host", ""]) {
      expect(isLoopbackHost(host), host).toBe(false);
    }
  });

  it("warns only for a non-loopback host that checks no keys", () => {
    expect(exposureWarning("127.0.0.1", false)).toBeNull();
    expect(exposureWarning("0.0.0.0", true)).toBeNull();
    const warning = exposureWarning("0.0.0.0", false)!;
    expect(warning).toContain("0.0.0.0");
    expect(warning).toContain("ANY API key is accepted from ANY machine");
    expect(warning).toContain("--cloud");
    expect(warning).toContain("--api-key");
  });
});

describe("/health warnings", () => {
  it("lists the server's warnings, and adds nothing when there are none", async () => {
    const warning = exposureWarning("0.0.0.0", false)!;
    const { app } = await fakeApp({ warnings: [warning] });
    const res = await app.inject({ method: "GET", url: "/health" });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: "ok", warnings: [warning] });
    const { app: quiet } = await fakeApp();
    expect((await quiet.inject({ method: "GET", url: "/health" })).json()).not.toHaveProperty("warnings");
  });
});

describe("/metrics in cloud mode", () => {
  it("answers 401 without a valid key, and the metrics with one; /health stays open", async () => {
    const keys = sqliteKeyStore(openDatabase({ path: ":memory:" }));
    const { key, record } = await keys.create("ops", { models: ["smollm2-360m-instruct"] });
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    const metrics = (authorization?: string) => app.inject({ method: "GET", url: "/metrics", headers: authorization ? { authorization } : {} });
    for (const authorization of [undefined, "Bearer", "Bearer kiln-not-a-key"]) {
      const res = await metrics(authorization);
      expect(res.statusCode, String(authorization)).toBe(401);
      expect(res.json().error).toMatchObject({ type: "invalid_request_error", code: "invalid_api_key", param: null });
      expect(res.headers["x-request-id"]).toMatch(/^req_/);
    }
    // Any valid key, whatever its model list: the metrics are the server's, not a model's.
    const ok = await metrics(`Bearer ${key}`);
    expect(ok.statusCode).toBe(200);
    expect(ok.body).toContain("# TYPE kiln_http_requests_total counter");
    expect(ok.body).toContain('kiln_http_requests_total{method="GET",route="/metrics",status="401"} 3');
    await keys.revoke(record.id);
    expect((await metrics(`Bearer ${key}`)).statusCode).toBe(401);
    expect((await app.inject({ method: "GET", url: "/health" })).statusCode).toBe(200);
  });
});
