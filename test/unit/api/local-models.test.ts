/** /v1/models with a model served from a local GGUF file: listed after the catalogue as a local file, found by its slug, answering chats. */
import { describe, expect, it } from "vitest";
import { AUTH, fakeApp, fakeModel } from "./fake-model.js";

const LOCAL = "my-model-q4_k_m";

function localFake() {
  const fake = fakeModel({ slug: LOCAL });
  fake.model.localFile = "/models/My-Model.Q4_K_M.gguf";
  return fake;
}

describe("a model served from a local file", () => {
  it("is listed after the catalogue's 42, as a local file with its path", async () => {
    const { app } = await fakeApp({ fake: localFake() });
    const { data } = (await app.inject({ method: "GET", url: "/v1/models", headers: AUTH })).json();
    expect(data).toHaveLength(43);
    expect(data.at(-1)).toMatchObject({
      id: LOCAL,
      object: "model",
      owned_by: "local-file",
      display_name: "My-Model.Q4_K_M.gguf",
      kind: "text",
      status: "serving",
      availability: "served",
      local_path: "/models/My-Model.Q4_K_M.gguf",
      pricing: {},
      artifact_id: "fake-artifact-1",
    });
  });

  it("is found by its slug, and answers a chat under it", async () => {
    const { app } = await fakeApp({ fake: localFake() });
    expect((await app.inject({ method: "GET", url: `/v1/models/${LOCAL}`, headers: AUTH })).json()).toMatchObject({ id: LOCAL, owned_by: "local-file" });
    const res = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      headers: AUTH,
      payload: { model: LOCAL, messages: [{ role: "user", content: "hi" }], max_tokens: 3 },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ model: LOCAL, usage: { completion_tokens: 3 } });
  });

  it("is not found once no server serves it", async () => {
    const { app } = await fakeApp();
    expect((await app.inject({ method: "GET", url: `/v1/models/${LOCAL}`, headers: AUTH })).statusCode).toBe(404);
  });
});
