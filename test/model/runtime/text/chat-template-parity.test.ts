// Claim: the chat prompt kiln renders is byte-identical to what llama.cpp's own template handling gives.
//
// Oracles, strongest first:
// 1. llama.cpp's own Jinja engine (common/jinja, the engine llama-server uses; --jinja is its default),
//    live, through node-llama-cpp's native addon class AddonJinjaRenderer. node-llama-cpp does not
//    expose llama_chat_apply_template (llama.cpp's legacy hard-coded formats), and its public
//    JinjaTemplateChatWrapper renders with @huggingface/jinja first, the same engine kiln uses, so it
//    would prove nothing; the addon class is internal (llama._bindings), hence the guarded lookup.
//    We give it the variables llama.cpp's common_chat_template_direct_apply gives: messages,
//    bos_token, eos_token, tools when present, add_generation_prompt only when true.
// 2. Python jinja2 set up as Hugging Face transformers' apply_chat_template sets it up (the engine
//    templates are written against), rendered once into test/fixtures/text/chat-template-expected.json
//    by gen-chat-template-expected.py, so this test needs no Python.
// The templates are SmolLM2's real one (checked against the GGUF) plus four written to exercise
// trim/slicing, raise_exception, tojson, typed content and strftime_now.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, type Llama } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatTemplateError, renderChat, type ChatMessage } from "../../../../src/runtime/text/chat-template.js";
import { textFromGguf, TEST_GGUF } from "../../../fixtures/text/spec-from-gguf.js";

const FIXTURES = fileURLToPath(new URL("../../../fixtures/text", import.meta.url));

interface Case {
  name: string;
  template: string;
  messages: ChatMessage[];
  templateMessages?: ChatMessage[];
  addGenerationPrompt?: boolean;
  bosToken?: string;
  eosToken?: string;
  tools?: unknown[];
  usesClock?: boolean;
}
interface Expected {
  name: string;
  output?: string;
  raised?: string;
}

const cases = (JSON.parse(readFileSync(join(FIXTURES, "chat-template-cases.json"), "utf8")) as { cases: Case[] }).cases;
const expected = JSON.parse(readFileSync(join(FIXTURES, "chat-template-expected.json"), "utf8")) as { now: string; results: Expected[] };
const templateSource = (name: string) => readFileSync(join(FIXTURES, "chat-templates", `${name}.jinja`), "utf8");
const pinnedNow = new Date(expected.now); // ISO without zone: local time, like Python's naive datetime

function renderWithKiln(c: Case): string {
  return renderChat(templateSource(c.template), c.messages, {
    addGenerationPrompt: c.addGenerationPrompt,
    bosToken: c.bosToken,
    eosToken: c.eosToken,
    tools: c.tools,
    now: () => pinnedNow,
  });
}

describe("chat template rendering matches Python jinja2 (HF apply_chat_template setup)", () => {
  it("has an expected rendering for every case", () => {
    expect(expected.results.map((r) => r.name)).toEqual(cases.map((c) => c.name));
  });

  cases.forEach((c, i) => {
    it(c.name, () => {
      const want = expected.results[i];
      if (want.raised !== undefined) {
        expect(() => renderWithKiln(c)).toThrow(ChatTemplateError);
        expect(() => renderWithKiln(c)).toThrow(want.raised);
      } else {
        expect(renderWithKiln(c)).toBe(want.output);
      }
    });
  });
});

describe("the SmolLM2 fixture template", () => {
  it("is byte-identical to the GGUF's tokenizer.chat_template", async () => {
    expect((await textFromGguf(TEST_GGUF)).chatTemplate).toBe(templateSource("smollm2"));
  });
});

type NativeRenderer = new (template: string) => { render(variables: Record<string, unknown>): string };

describe("chat template rendering matches llama.cpp's own Jinja engine, live", () => {
  let llama: Llama | undefined;
  let Native: NativeRenderer | undefined;

  beforeAll(async () => {
    try {
      llama = await getLlama({ gpu: false });
    } catch (error) {
      console.warn(`llama.cpp comparison skipped: node-llama-cpp could not load (${(error as Error).message})`);
      return;
    }
    Native = (llama as unknown as { _bindings?: { AddonJinjaRenderer?: NativeRenderer } })._bindings?.AddonJinjaRenderer;
    if (!Native) console.warn("llama.cpp comparison skipped: node-llama-cpp no longer exposes AddonJinjaRenderer");
  });

  afterAll(async () => {
    await llama?.dispose();
  });

  for (const c of cases.filter((x) => !x.usesClock)) {
    it(c.name, (ctx) => {
      if (!Native) return ctx.skip();
      const variables: Record<string, unknown> = {
        messages: c.templateMessages ?? c.messages,
        ...(c.bosToken !== undefined ? { bos_token: c.bosToken } : {}),
        ...(c.eosToken !== undefined ? { eos_token: c.eosToken } : {}),
        ...(c.tools !== undefined ? { tools: c.tools } : {}),
        ...(c.addGenerationPrompt ? { add_generation_prompt: true } : {}),
      };
      const native = new Native(templateSource(c.template));
      let theirs: string | Error;
      try {
        theirs = native.render(variables);
      } catch (error) {
        theirs = error as Error;
      }
      if (theirs instanceof Error) {
        expect(() => renderWithKiln(c)).toThrow(ChatTemplateError);
        expect(theirs.message).toContain(expected.results[cases.indexOf(c)].raised);
      } else {
        expect(renderWithKiln(c)).toBe(theirs);
      }
    });
  }
});
