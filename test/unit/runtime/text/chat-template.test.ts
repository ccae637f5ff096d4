import { describe, expect, it } from "vitest";
import { ChatTemplate, ChatTemplateError, renderChat, strftime } from "../../../../src/runtime/text/chat-template.js";

const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

describe("renderChat", () => {
  const messages = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Hello." },
    { role: "user", content: "Bye" },
  ];

  it("renders a ChatML conversation with system, user and assistant turns", () => {
    expect(renderChat(CHATML, messages)).toBe(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n",
    );
  });

  it("appends the assistant header when a generation prompt is asked for", () => {
    expect(renderChat(CHATML, messages.slice(1, 2), { addGenerationPrompt: true })).toBe("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  });

  it("joins text parts with newlines for templates that expect strings, like llama.cpp", () => {
    const parts = [{ role: "user", content: [{ type: "text", text: "a" }, { type: "image_url" }, { type: "text", text: "b" }] }];
    expect(renderChat(CHATML, parts)).toBe("<|im_start|>user\na\nb<|im_end|>\n");
  });

  it("keeps parts for templates that look inside content", () => {
    const typed = "{% for m in messages %}{% for p in m['content'] %}[{{ p['type'] }}]{% endfor %}{% endfor %}";
    expect(renderChat(typed, [{ role: "user", content: [{ type: "text", text: "a" }, { type: "image" }] }])).toBe("[text][image]");
  });

  it("provides bos_token, eos_token, tools and extra variables", () => {
    const t = "{{ bos_token }}{{ tools | length }}{{ greeting }}{{ eos_token }}";
    expect(renderChat(t, [], { bosToken: "<s>", eosToken: "</s>", tools: [{}, {}], extra: { greeting: "hey" } })).toBe("<s>2hey</s>");
  });

  it("reports raise_exception from the template as a ChatTemplateError raised by the template", () => {
    const strict = "{% if messages[-1]['role'] != 'assistant' %}{{ raise_exception('last message must be from the assistant') }}{% endif %}ok";
    const error = (() => {
      try {
        renderChat(strict, messages);
      } catch (e) {
        return e;
      }
    })() as ChatTemplateError;
    expect(error).toBeInstanceOf(ChatTemplateError);
    expect(error.raisedByTemplate).toBe(true);
    expect(error.message).toContain("last message must be from the assistant");
  });

  it("reports templates that do not parse or fail to run", () => {
    expect(() => new ChatTemplate("{% for x in %}")).toThrow(ChatTemplateError);
    try {
      renderChat("{{ messages[0]['content'].nope() }}", messages);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(ChatTemplateError);
      expect((e as ChatTemplateError).raisedByTemplate).toBe(false);
    }
  });

  it("offers strftime_now with Python's directives", () => {
    const now = new Date(2025, 0, 5, 14, 7, 9);
    expect(renderChat("{{ strftime_now('%d %b %Y') }}", [], { now: () => now })).toBe("05 Jan 2025");
    expect(strftime(now, "%-d %B %y %I:%M:%S %p %a %j %%")).toBe("5 January 25 02:07:09 PM Sun 005 %");
  });
});
