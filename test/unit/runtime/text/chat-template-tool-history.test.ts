/**
 * Tool-call histories through chat templates: what LangChain and the official clients send when
 * they replay a conversation (an assistant message with `content: null` and `tool_calls` whose
 * `function.arguments` is a JSON string, then `role: "tool"` results).
 *
 * SmolLM2's real template (the fixture, checked byte-identical to the GGUF's by the model parity
 * test) concatenates `message['content']`, so before this it threw "Cannot perform operation on
 * null values" on such a history and the server answered 500. A template that renders tool calls
 * gets them with the arguments as an object, as transformers' templates expect; one that does not
 * gets llama.cpp's fallback (minja's polyfills): the calls and the results as JSON text.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ChatTemplate, ChatTemplateError, type ChatMessage } from "../../../../src/runtime/text/chat-template.js";

const fixture = (name: string) => readFileSync(new URL(`../../../fixtures/text/chat-templates/${name}.jinja`, import.meta.url), "utf8");

/** A replayed history: two parallel calls (one with no arguments), their results, then a question. */
const HISTORY: ChatMessage[] = [
  { role: "system", content: "Use the tools." },
  { role: "user", content: "Weather in Paris, and the time?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris","days":2}' } },
      { id: "call_2", type: "function", function: { name: "get_time", arguments: "" } },
    ],
  },
  { role: "tool", tool_call_id: "call_1", content: "22 C, sunny" },
  {
    role: "tool",
    tool_call_id: "call_2",
    content: [
      { type: "text", text: "10:00" },
      { type: "text", text: "CET" },
    ],
  },
];

/** A Hermes/Qwen 2.5-style template: `<tool_call>` with `tojson` arguments, results in `<tool_response>`. */
const HERMES = `{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' + tool_call.arguments | tojson + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}`;

/** A Llama 3-style template that iterates the arguments as a mapping. */
const ITERATES = `{%- for message in messages %}
{%- if message.tool_calls %}{%- for call in message.tool_calls %}[{{ call.function.name }}({% for k, v in call.function.arguments.items() %}{{ k }}={{ v }};{% endfor %})]{%- endfor %}
{%- elif message.role == 'tool' %}<result {{ message.tool_call_id }}>{{ message.content }}</result>
{%- else %}<{{ message.role }}>{{ message.content }}
{%- endif %}
{%- endfor %}`;

/** A DeepSeek-style template that concatenates the arguments string. */
const CONCATENATES = `{%- for message in messages %}
{%- if message.tool_calls %}{%- for call in message.tool_calls %}<call>{{ call.function.name + '\\n' + call.function.arguments }}</call>{%- endfor %}
{%- elif message.role == 'tool' %}<output>{{ message.content }}</output>
{%- else %}<{{ message.role }}>{{ message.content }}
{%- endif %}
{%- endfor %}`;

describe("a template without tool support (SmolLM2's real one): llama.cpp's JSON-text fallback", () => {
  const smollm2 = new ChatTemplate(fixture("smollm2"));

  it("is probed as one that renders neither tool calls nor tool results, nor null content", () => {
    expect(smollm2.toolHistoryCaps).toEqual({
      requiresNonNullContent: true,
      callsNeedNullContent: false,
      supportsToolCalls: false,
      objectArguments: false,
      supportsToolResponses: false,
    });
  });

  it("renders the calls as JSON text in the assistant's turn and each result as a user turn holding JSON", () => {
    expect(smollm2.render(HISTORY, { addGenerationPrompt: true })).toBe(
      [
        "<|im_start|>system\nUse the tools.<|im_end|>",
        "<|im_start|>user\nWeather in Paris, and the time?<|im_end|>",
        "<|im_start|>assistant",
        "{",
        '  "tool_calls": [',
        "    {",
        '      "name": "get_weather",',
        '      "arguments": {',
        '        "city": "Paris",',
        '        "days": 2',
        "      },",
        '      "id": "call_1"',
        "    },",
        "    {",
        '      "name": "get_time",',
        '      "arguments": {},',
        '      "id": "call_2"',
        "    }",
        "  ]",
        "}<|im_end|>",
        "<|im_start|>user",
        "{",
        '  "tool_response": {',
        '    "content": "22 C, sunny",',
        '    "tool_call_id": "call_1"',
        "  }",
        "}<|im_end|>",
        "<|im_start|>user",
        "{",
        '  "tool_response": {',
        '    "content": "10:00\\nCET",',
        '    "tool_call_id": "call_2"',
        "  }",
        "}<|im_end|>",
        "<|im_start|>assistant\n",
      ].join("\n"),
    );
  });

  it("keeps the assistant's text beside its calls, and a result's tool name", () => {
    const messages: ChatMessage[] = [
      { role: "user", content: "hi" },
      { role: "assistant", content: "Let me look.", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "c", name: "f", content: "done" },
    ];
    const [, assistant, result] = smollm2.prepareMessages(messages);
    expect(assistant).toEqual({
      role: "assistant",
      content: JSON.stringify({ tool_calls: [{ name: "f", arguments: {}, id: "c" }], content: "Let me look." }, null, 2),
    });
    expect(result).toEqual({
      role: "user",
      tool_call_id: "c",
      content: JSON.stringify({ tool_response: { tool: "f", content: "done", tool_call_id: "c" } }, null, 2),
    });
  });

  it("leaves ordinary conversations untouched, and preparing twice changes nothing", () => {
    const ordinary: ChatMessage[] = [
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello" },
    ];
    expect(smollm2.prepareMessages(ordinary)).toEqual(ordinary);
    const once = smollm2.prepareMessages(HISTORY);
    expect(smollm2.prepareMessages(once)).toEqual(once);
    expect(smollm2.render(once, { prepared: true })).toBe(smollm2.render(HISTORY));
  });
});

describe("templates with tool support get the calls natively", () => {
  it("Hermes/Qwen style: arguments as an object printed with tojson, results as the template writes them", () => {
    const t = new ChatTemplate(HERMES);
    expect(t.toolHistoryCaps).toMatchObject({ supportsToolCalls: true, objectArguments: true, supportsToolResponses: true });
    expect(t.render(HISTORY.slice(1), { addGenerationPrompt: true })).toBe(
      "<|im_start|>user\nWeather in Paris, and the time?<|im_end|>\n" +
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>' +
        '\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>\n' +
        "<|im_start|>user\n<tool_response>\n22 C, sunny\n</tool_response><|im_end|>\n" +
        "<|im_start|>user\n<tool_response>\n10:00\nCET\n</tool_response><|im_end|>\n" +
        "<|im_start|>assistant\n",
    );
  });

  it("Llama 3 style: arguments iterated as a mapping", () => {
    const t = new ChatTemplate(ITERATES);
    expect(t.render(HISTORY.slice(1, 4))).toBe(
      "<user>Weather in Paris, and the time?[get_weather(city=Paris;days=2;)][get_time()]<result call_1>22 C, sunny</result>",
    );
  });

  it("a template that only renders the string gets the string", () => {
    const t = new ChatTemplate(CONCATENATES);
    expect(t.toolHistoryCaps).toMatchObject({ supportsToolCalls: true, objectArguments: false });
    expect(t.render(HISTORY.slice(2, 4))).toBe('<call>get_weather\n{"city":"Paris","days":2}</call><call>get_time\n</call><output>22 C, sunny</output>');
  });

  it('the null content of a call becomes "" for a template that cannot print null, and stays null for one that can', () => {
    const concatenating = new ChatTemplate(HERMES);
    expect(concatenating.prepareMessages(HISTORY)[2].content).toBe("");
    const tolerant = new ChatTemplate(ITERATES);
    expect(tolerant.toolHistoryCaps.requiresNonNullContent).toBe(false);
    expect(tolerant.prepareMessages(HISTORY)[2].content).toBeNull();
  });
});

describe("a template that still cannot render the history", () => {
  it("raises its own error (roles that do not alternate), as a ChatTemplateError raised by the template", () => {
    // mistral-like has no tool support: the results become user turns, and two in a row break its alternation.
    const t = new ChatTemplate(fixture("mistral-like"));
    const error = (() => {
      try {
        t.render(HISTORY.slice(1), { bosToken: "<s>", eosToken: "</s>" });
      } catch (e) {
        return e as ChatTemplateError;
      }
    })();
    expect(error).toBeInstanceOf(ChatTemplateError);
    expect(error?.raisedByTemplate).toBe(true);
    expect(error?.phase).toBe("render");
    expect(error?.message).toContain("Conversation roles must alternate");
    // One call and one result alternate, and render.
    expect(t.render(HISTORY.slice(1, 4), { bosToken: "<s>", eosToken: "</s>" })).toContain('[INST] {\n  "tool_response": {\n    "content": "22 C, sunny"');
  });

  it("a template that does not parse is a parse-phase error (the server's, not the request's)", () => {
    try {
      new ChatTemplate("{% for x in %}");
      expect.unreachable();
    } catch (e) {
      expect((e as ChatTemplateError).phase).toBe("parse");
    }
  });
});
