/** The web console's routes: the page and its bundled assets, open without a key, and the track records behind its track pages. */
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { bundleConsole } from "../../../src/api/console.js";
import { fakeApp } from "./fake-model.js";

const cloudAuth = { mode: "cloud" as const, keys: { verify: async () => null } };

describe("the console", () => {
  it("serves its page, script and stylesheet with no key, from this origin only", async () => {
    const { app } = await fakeApp({ auth: cloudAuth });
    const page = await app.inject({ method: "GET", url: "/" });
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(page.headers["content-security-policy"]).toMatch(/^default-src 'self'; script-src 'self';/);
    expect(page.body).toContain('<script type="module" src="/console/app.js">');
    const script = await app.inject({ method: "GET", url: "/console/app.js" });
    expect(script.statusCode).toBe(200);
    expect(script.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    // uPlot is bundled in, and nothing is fetched from another host.
    expect(script.body).toContain("uplot");
    expect(script.body).not.toMatch(/(?:import|fetch)\(\s*["']https?:/);
    const style = await app.inject({ method: "GET", url: "/console/app.css" });
    expect(style.statusCode).toBe(200);
    expect(style.body).toContain(".uplot");
    await app.close();
  });

  it("stays small: under 40 KB of script and 5 KB of styles gzipped", async () => {
    const bundle = await bundleConsole();
    expect(gzipSync(bundle.js).length).toBeLessThan(40_000);
    expect(gzipSync(bundle.css).length).toBeLessThan(5_000);
  });

  it("answers a model's track through the port, 404 for an unknown model or without records", async () => {
    const asked: string[] = [];
    const { app } = await fakeApp({ tracks: { history: (slug) => (asked.push(slug), { slug, current: null, candidates: [], trend: [] }) } });
    const track = await app.inject({ method: "GET", url: "/console/api/tracks/smollm2-360m-instruct" });
    expect(track.statusCode).toBe(200);
    expect(track.json()).toEqual({ slug: "smollm2-360m-instruct", current: null, candidates: [], trend: [], operator: false });
    expect(asked).toEqual(["smollm2-360m-instruct"]);
    const unknown = await app.inject({ method: "GET", url: "/console/api/tracks/no-such-model" });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe("model_not_found");
    await app.close();

    const { app: bare } = await fakeApp();
    expect((await bare.inject({ method: "GET", url: "/console/api/tracks/smollm2-360m-instruct" })).statusCode).toBe(404);
    await bare.close();
  });

  it("asks for a key for track records in cloud mode", async () => {
    const { app } = await fakeApp({ auth: cloudAuth, tracks: { history: (slug) => ({ slug }) } });
    expect((await app.inject({ method: "GET", url: "/console/api/tracks/smollm2-360m-instruct" })).statusCode).toBe(401);
    await app.close();
  });

  describe("promote and rollback from a track page", () => {
    const SLUG = "smollm2-360m-instruct";
    const calls: string[] = [];
    const tracks = {
      history: (slug: string) => ({ slug }),
      promote: (slug: string, artifact: string) => {
        if (artifact === "missing") throw new Error(`no compiled artifact missing of ${slug}`);
        calls.push(`promote ${slug} ${artifact}`);
        return `${slug}: serving ${artifact}`;
      },
      rollback: (slug: string) => (calls.push(`rollback ${slug}`), calls.length > 2 ? null : `${slug}: rolled back`),
    };
    const json = { "content-type": "application/json", host: "127.0.0.1:8000" };

    it("are offered in local mode, and answer what serves now or why not", async () => {
      const { app } = await fakeApp({ tracks });
      expect((await app.inject({ method: "GET", url: `/console/api/tracks/${SLUG}` })).json()).toEqual({ slug: SLUG, operator: true });
      const promoted = await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/promote`, headers: json, payload: { artifact: "abc" } });
      expect(promoted.statusCode).toBe(200);
      expect(promoted.json()).toEqual({ message: `${SLUG}: serving abc` });
      const missing = await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/promote`, headers: json, payload: { artifact: "missing" } });
      expect(missing.statusCode).toBe(400);
      expect(missing.json().error.message).toBe(`no compiled artifact missing of ${SLUG}`);
      const unnamed = await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/promote`, headers: json, payload: {} });
      expect(unnamed.statusCode).toBe(400);
      expect(unnamed.json().error.param).toBe("artifact");
      expect((await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/rollback`, headers: json, payload: {} })).json()).toEqual({
        message: `${SLUG}: rolled back`,
      });
      const nothing = await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/rollback`, headers: json, payload: {} });
      expect(nothing.statusCode).toBe(400);
      expect(nothing.json().error.message).toContain("has no promoted artifact");
      expect(calls).toEqual([`promote ${SLUG} abc`, `rollback ${SLUG}`, `rollback ${SLUG}`]);
      await app.close();
    });

    it("are refused from another site's page, or without a JSON body", async () => {
      calls.length = 0;
      const { app } = await fakeApp({ tracks });
      const foreign = await app.inject({
        method: "POST",
        url: `/console/api/tracks/${SLUG}/rollback`,
        headers: { ...json, origin: "https://example.com" },
        payload: {},
      });
      expect(foreign.statusCode).toBe(400);
      expect(foreign.json().error.message).toContain("from this server's own console");
      const form = await app.inject({
        method: "POST",
        url: `/console/api/tracks/${SLUG}/promote`,
        headers: { "content-type": "text/plain", host: "127.0.0.1:8000" },
        payload: '{"artifact":"abc"}',
      });
      expect(form.statusCode).toBe(400);
      const own = await app.inject({
        method: "POST",
        url: `/console/api/tracks/${SLUG}/promote`,
        headers: { ...json, origin: "http://127.0.0.1:8000" },
        payload: { artifact: "abc" },
      });
      expect(own.statusCode).toBe(200);
      expect(calls).toEqual([`promote ${SLUG} abc`]);
      await app.close();
    });

    describe("in cloud mode", () => {
      const keys = {
        verify: async (key: string) =>
          key === "sk-admin"
            ? { id: "key_ops", name: "ops", models: null, admin: true }
            : key === "sk-client"
              ? { id: "key_1", name: "k", models: null, admin: false }
              : null,
      };
      const as = (key: string) => ({ ...json, authorization: `Bearer ${key}` });

      it("take an admin key: a client's key gets 403 admin_key_required and changes nothing", async () => {
        calls.length = 0;
        const { app } = await fakeApp({ auth: { mode: "cloud", keys }, tracks });
        expect((await app.inject({ method: "GET", url: `/console/api/tracks/${SLUG}`, headers: as("sk-client") })).json()).toEqual({
          slug: SLUG,
          operator: false,
        });
        for (const [action, payload] of [
          ["promote", { artifact: "abc" }],
          ["rollback", {}],
        ] as const) {
          const refused = await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/${action}`, headers: as("sk-client"), payload });
          expect(refused.statusCode).toBe(403);
          expect(refused.json()).toEqual({
            error: { message: expect.stringContaining("admin key"), type: "permission_error", param: null, code: "admin_key_required" },
          });
        }
        expect((await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/rollback`, headers: json, payload: {} })).statusCode).toBe(401);
        expect(calls).toEqual([]);

        expect((await app.inject({ method: "GET", url: `/console/api/tracks/${SLUG}`, headers: as("sk-admin") })).json()).toEqual({
          slug: SLUG,
          operator: true,
        });
        const promoted = await app.inject({
          method: "POST",
          url: `/console/api/tracks/${SLUG}/promote`,
          headers: as("sk-admin"),
          payload: { artifact: "abc" },
        });
        expect(promoted.statusCode).toBe(200);
        expect(promoted.json()).toEqual({ message: `${SLUG}: serving abc` });
        const rolled = await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/rollback`, headers: as("sk-admin"), payload: {} });
        expect(rolled.json()).toEqual({ message: `${SLUG}: rolled back` });
        expect(calls).toEqual([`promote ${SLUG} abc`, `rollback ${SLUG}`]);
        await app.close();
      });

      it("refuse another site's page even with an admin key", async () => {
        calls.length = 0;
        const { app } = await fakeApp({ auth: { mode: "cloud", keys }, tracks });
        const foreign = await app.inject({
          method: "POST",
          url: `/console/api/tracks/${SLUG}/rollback`,
          headers: { ...as("sk-admin"), origin: "https://example.com" },
          payload: {},
        });
        expect(foreign.statusCode).toBe(400);
        expect(foreign.json().error.message).toContain("from this server's own console");
        expect(calls).toEqual([]);
        await app.close();
      });

      it("do not exist where the server does not offer them (no admin key helps)", async () => {
        const { app } = await fakeApp({ auth: { mode: "cloud", keys }, tracks: { history: tracks.history } });
        expect((await app.inject({ method: "GET", url: `/console/api/tracks/${SLUG}`, headers: as("sk-admin") })).json()).toEqual({
          slug: SLUG,
          operator: false,
        });
        expect((await app.inject({ method: "POST", url: `/console/api/tracks/${SLUG}/rollback`, headers: as("sk-admin"), payload: {} })).statusCode).toBe(404);
        await app.close();
      });
    });
  });

  describe("the session and the key's usage", () => {
    const cloudKey = {
      mode: "cloud" as const,
      keys: {
        verify: async (key: string) =>
          key === "sk-a" ? { id: "key_a", name: "alice", models: null } : key === "sk-ops" ? { id: "key_ops", name: "ops", models: null, admin: true } : null,
      },
    };
    const asked: string[] = [];
    const usageReport = {
      usage: async (keyId: string, since: string) => {
        asked.push(`${keyId} ${since}`);
        return [{ day: "2026-11-26", model: "smollm2-135m-instruct", requests: 2, promptTokens: 10, completionTokens: 20, audioMs: 0, costNanoUsd: "1500" }];
      },
    };

    it("says the mode in local mode, where there is no usage", async () => {
      const { app } = await fakeApp({ usageReport });
      expect((await app.inject({ method: "GET", url: "/console/api/session" })).json()).toEqual({ mode: "local", key: null, usage: false, operator: false });
      expect((await app.inject({ method: "GET", url: "/console/api/usage" })).statusCode).toBe(404);
      await app.close();
    });

    it("in cloud mode asks for a key, then shows that key's usage only", async () => {
      asked.length = 0;
      const { app } = await fakeApp({ auth: cloudKey, usageReport });
      expect((await app.inject({ method: "GET", url: "/console/api/session" })).statusCode).toBe(401);
      expect((await app.inject({ method: "GET", url: "/console/api/usage" })).statusCode).toBe(401);
      const headers = { authorization: "Bearer sk-a" };
      expect((await app.inject({ method: "GET", url: "/console/api/session", headers })).json()).toEqual({
        mode: "cloud",
        key: { id: "key_a", name: "alice", admin: false },
        usage: true,
        operator: false,
      });
      const usage = await app.inject({ method: "GET", url: "/console/api/usage", headers });
      expect(usage.statusCode).toBe(200);
      const since = new Date(Date.now() - 30 * 86_400_000).toISOString().slice(0, 10);
      expect(usage.json()).toEqual({
        key: "key_a",
        since,
        days: [{ day: "2026-11-26", model: "smollm2-135m-instruct", requests: 2, promptTokens: 10, completionTokens: 20, audioMs: 0, costNanoUsd: "1500" }],
      });
      expect(asked).toEqual([`key_a ${since}`]);
      await app.close();
    });

    it("says whether the session may promote and roll back: local mode where offered, cloud mode with an admin key only", async () => {
      const offered = { history: (slug: string) => ({ slug }), promote: () => "promoted", rollback: () => "rolled back" };
      const { app: local } = await fakeApp({ tracks: offered });
      expect((await local.inject({ method: "GET", url: "/console/api/session" })).json()).toMatchObject({ mode: "local", operator: true });
      await local.close();

      const { app } = await fakeApp({ auth: cloudKey, usageReport, tracks: offered });
      const session = async (key: string) =>
        (await app.inject({ method: "GET", url: "/console/api/session", headers: { authorization: `Bearer ${key}` } })).json();
      expect(await session("sk-ops")).toEqual({ mode: "cloud", key: { id: "key_ops", name: "ops", admin: true }, usage: true, operator: true });
      expect(await session("sk-a")).toMatchObject({ key: { admin: false }, operator: false });
      await app.close();

      // A server that offers no operator actions says so to an admin key too.
      const { app: bare } = await fakeApp({ auth: cloudKey });
      expect((await bare.inject({ method: "GET", url: "/console/api/session", headers: { authorization: "Bearer sk-ops" } })).json()).toMatchObject({
        key: { admin: true },
        operator: false,
      });
      await bare.close();
    });
  });
});
