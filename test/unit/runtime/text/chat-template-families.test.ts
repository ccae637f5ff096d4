// Every catalogue family's real chat template renders the conversations of
// test/fixtures/templates/cases.ts exactly as llama.cpp's own Jinja engine renders them (rendered
// once into expected.json by gen-expected.ts, with Python jinja2 as a second opinion), after the
// same message workarounds llama.cpp applies (a system message folded into the next message for
// templates without a system role, tool histories in the template's shape). Without the system fold,
// 11 cases of Gemma 2, Mixtral 8x7B and Phi-3 fail; without the null-content retry of the
// tool-call probe, DeepSeek-R1 distills' tool history renders as polyfilled JSON and fails.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ChatTemplate, ChatTemplateError, type ChatMessage } from "../../../../src/runtime/text/chat-template.js";
import { REFUSED_CASES, TEMPLATE_CASES } from "../../../fixtures/templates/cases.js";

const FIXTURES = join(import.meta.dirname, "../../../fixtures/templates");
const expected = JSON.parse(readFileSync(join(FIXTURES, "expected.json"), "utf8")) as {
  results: Array<{ name: string; output?: string; raised?: string }>;
};
const templates = new Map<string, ChatTemplate>();
const template = (name: string) => {
  let t = templates.get(name);
  if (!t) templates.set(name, (t = new ChatTemplate(readFileSync(join(FIXTURES, `${name}.jinja`), "utf8"))));
  return t;
};

describe("chat templates of every family render like llama.cpp", () => {
  it("has an expected rendering for every case", () => {
    expect(expected.results.map((r) => r.name)).toEqual([...TEMPLATE_CASES, ...REFUSED_CASES].map((c) => c.name));
  });

  for (const c of TEMPLATE_CASES) {
    it(c.name, () => {
      const want = expected.results.find((r) => r.name === c.name)!;
      expect(want.output, "llama.cpp rendered it").toBeDefined();
      const rendered = template(c.template).render(c.messages as ChatMessage[], {
        addGenerationPrompt: c.addGenerationPrompt,
        bosToken: c.bosToken,
        eosToken: c.eosToken,
        tools: c.tools,
        extra: c.extra,
      });
      expect(rendered).toBe(want.output);
    });
  }

  for (const c of REFUSED_CASES) {
    it(`${c.name}: refused as the request's fault`, () => {
      const render = () => template(c.template).render(c.messages as ChatMessage[], { bosToken: c.bosToken, eosToken: c.eosToken, addGenerationPrompt: true });
      expect(render).toThrow(ChatTemplateError);
      expect(render).toThrow(c.raises);
      try {
        render();
      } catch (error) {
        expect((error as ChatTemplateError).phase).toBe("render");
      }
    });
  }
});

describe("a leading system message on a template without a system role", () => {
  it("is found by probing the template, as llama.cpp's caps do", () => {
    const without = ["gemma-2", "mixtral-v0.1", "phi-3"];
    for (const name of [
      "llama-3.1",
      "llama-3.2",
      "qwen2.5",
      "qwen3",
      "mistral-v3",
      "gemma-3",
      "phi-3.5",
      "phi-4",
      "deepseek-r1-distill",
      "smollm2",
      ...without,
    ]) {
      expect(template(name).supportsSystemRole, name).toBe(!without.includes(name));
    }
  });

  it("is folded into the first user turn (hand-checked against llama.cpp's own test expectations)", () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello" },
    ];
    expect(template("gemma-2").render(messages, { bosToken: "<bos>", addGenerationPrompt: true })).toBe(
      "<bos><start_of_turn>user\nBe brief.\nHello<end_of_turn>\n<start_of_turn>model\n",
    );
    expect(template("phi-3").render(messages, { bosToken: "<s>", addGenerationPrompt: true })).toBe("<s><|user|>\nBe brief.\nHello<|end|>\n<|assistant|>\n");
    // Content parts: the system text goes before the first text part.
    const parts: ChatMessage[] = [messages[0], { role: "user", content: [{ type: "text", text: "Hello" }] }];
    expect(template("gemma-2").prepareMessages(parts, { contentParts: "keep" })).toEqual([
      { role: "user", content: [{ type: "text", text: "Be brief.\nHello" }] },
    ]);
  });
});

describe("which families reason in <think> tags", () => {
  const FAMILIES = [
    "deepseek-r1-distill",
    "gemma-2",
    "gemma-3",
    "llama-3.1",
    "llama-3.2",
    "mistral-v3",
    "mixtral-v0.1",
    "phi-3.5",
    "phi-3",
    "phi-4",
    "qwen2.5",
    "qwen3",
    "smollm2",
  ];
  const reasoningOf = (name: string) => new ChatTemplate(readFileSync(join(FIXTURES, `${name}.jinja`), "utf8")).reasoning;

  it("Qwen3 and the DeepSeek-R1 distills do, and only Qwen3's template switches it off", () => {
    const found = Object.fromEntries(FAMILIES.map((name) => [name, reasoningOf(name)]));
    expect(found).toEqual({
      ...Object.fromEntries(FAMILIES.map((name) => [name, null])),
      "deepseek-r1-distill": { switchable: false },
      qwen3: { switchable: true },
    });
  });

  it("Qwen3 with enable_thinking false renders an empty reasoning into the prompt; the R1 distills open it", () => {
    const user: ChatMessage[] = [{ role: "user", content: "hi" }];
    const qwen3 = new ChatTemplate(readFileSync(join(FIXTURES, "qwen3.jinja"), "utf8"));
    expect(qwen3.render(user, { addGenerationPrompt: true })).toMatch(/<\|im_start\|>assistant\n$/);
    expect(qwen3.render(user, { addGenerationPrompt: true, extra: { enable_thinking: false } })).toMatch(/assistant\n<think>\n\n<\/think>\n\n$/);
    const r1 = new ChatTemplate(readFileSync(join(FIXTURES, "deepseek-r1-distill.jinja"), "utf8"));
    expect(r1.render(user, { addGenerationPrompt: true, bosToken: "" })).toMatch(/<think>\n$/);
  });
});
