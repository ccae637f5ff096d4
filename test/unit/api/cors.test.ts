/**
 * Browsers: with `allowedOrigins`, a preflight is answered with the methods and headers allowed and
 * every answer (errors and streams included) carries `access-control-allow-origin`; without it, or
 * from another origin, no CORS header is sent and a preflight is a 404 in the API's error shape.
 */
import { describe, expect, it } from "vitest";
import { originProblem } from "../../../src/api/cors.js";
import { AUTH, fakeApp, SLUG } from "./fake-model.js";

const PAGE = "https://app.example.com";
const preflight = (origin = PAGE) => ({
  method: "OPTIONS" as const,
  url: "/v1/chat/completions",
  headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, x-stainless-os" },
});
const chat = (stream = false) => ({
  method: "POST" as const,
  url: "/v1/chat/completions",
  headers: { ...AUTH, origin: PAGE },
  payload: { model: SLUG, messages: [{ role: "user", content: "hi" }], stream },
});

describe("CORS", () => {
  it("off by default: no header, and a preflight is a 404 that says why", async () => {
    const { app } = await fakeApp();
    try {
      const res = await app.inject(preflight());
      expect(res.statusCode).toBe(404);
      expect(res.json().error).toMatchObject({ type: "invalid_request_error", code: null, param: null });
      expect(res.json().error.message).toMatch(/--allowed-origins/);
      expect(res.headers["access-control-allow-origin"]).toBeUndefined();
      const answer = await app.inject(chat());
      expect(answer.statusCode).toBe(200);
      expect(answer.headers["access-control-allow-origin"]).toBeUndefined();
    } finally {
      await app.close();
    }
  });

  it("a listed origin: preflight answered, answers and streams carry the origin", async () => {
    const { app } = await fakeApp({ allowedOrigins: [PAGE, "http://localhost:5173"] });
    try {
      const res = await app.inject(preflight());
      expect(res.statusCode).toBe(204);
      expect(res.headers["access-control-allow-origin"]).toBe(PAGE);
      expect(res.headers["access-control-allow-methods"]).toMatch(/POST/);
      expect(res.headers["access-control-allow-headers"]).toBe("authorization, content-type, x-stainless-os");
      expect(res.headers.vary).toMatch(/origin/);
      for (const stream of [false, true]) {
        const answer = await app.inject(chat(stream));
        expect(answer.statusCode).toBe(200);
        expect(answer.headers["access-control-allow-origin"]).toBe(PAGE);
        expect(answer.headers["access-control-expose-headers"]).toMatch(/x-request-id/);
        if (stream) expect(answer.headers["content-type"]).toMatch(/text\/event-stream/);
      }
      const error = await app.inject({ ...chat(), payload: { model: SLUG } });
      expect(error.statusCode).toBe(400);
      expect(error.headers["access-control-allow-origin"]).toBe(PAGE);
      // Another origin gets nothing: the browser keeps its page from reading the answer.
      const other = await app.inject(preflight("https://evil.example"));
      expect(other.statusCode).toBe(404);
      expect(other.headers["access-control-allow-origin"]).toBeUndefined();
    } finally {
      await app.close();
    }
  });

  it("* allows any origin, without a key in the preflight even in cloud mode", async () => {
    const { app } = await fakeApp({ allowedOrigins: ["*"], auth: { mode: "cloud", keys: { verify: async () => null } } });
    try {
      const res = await app.inject(preflight("http://127.0.0.1:3000"));
      expect(res.statusCode).toBe(204);
      expect(res.headers["access-control-allow-origin"]).toBe("*");
      const models = await app.inject({ method: "GET", url: "/v1/models", headers: { origin: "http://127.0.0.1:3000" } });
      expect(models.statusCode).toBe(401);
      expect(models.headers["access-control-allow-origin"]).toBe("*");
    } finally {
      await app.close();
    }
  });

  it("origins are checked as written", () => {
    expect(originProblem("*")).toBeUndefined();
    expect(originProblem("https://app.example.com")).toBeUndefined();
    expect(originProblem("http://localhost:5173")).toBeUndefined();
    expect(originProblem("https://app.example.com/")).toMatch(/write it as https:\/\/app\.example\.com/);
    expect(originProblem("app.example.com")).toMatch(/not an origin/);
  });
});
