/**
 * Hermes-style calls, which Qwen2.5, Qwen3 and the Hermes models were trained on: each call is
 * `{"name": …, "arguments": …}` on its own line inside `<tool_call>` tags, prose may come first.
 * Also kiln's convention for models whose family has none (told to the model in a system prompt).
 */
import { openaiCallId, type ToolDialect } from "./dialect.js";

export const hermes: ToolDialect = {
  name: "hermes",
  syntax: { open: "<tool_call>", close: "</tool_call>", pad: "\n", array: false, separator: "\n", argumentsKey: "arguments", atStartOnly: false },
  instructions: (tools) =>
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
    `You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n${tools.map((t) => JSON.stringify(t)).join("\n")}\n</tools>\n\n` +
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>',
  newId: openaiCallId,
};
