/**
 * SmolLM2's own convention (its model card's function-calling prompt): the tools in `<tools>` tags in
 * the system prompt, and the calls as one JSON array inside `<tool_call>` tags. Its chat template
 * does not render tools, so the system prompt always carries them.
 */
import { openaiCallId, type ToolDialect } from "./dialect.js";

export const smollm2: ToolDialect = {
  name: "smollm2",
  syntax: { open: "<tool_call>", close: "</tool_call>", pad: "", array: true, separator: ", ", argumentsKey: "arguments", atStartOnly: false },
  instructions: (tools) =>
    "You are an expert in composing functions. You are given a question and a set of possible functions. " +
    "Based on the question, make one or more function calls to achieve the purpose; if none of the functions " +
    "can be used, or the question lacks the parameters a function needs, say so instead.\n\n" +
    `You have access to the following tools:\n<tools>${JSON.stringify(tools.map((t) => t.function))}</tools>\n\n` +
    "To call functions, answer with only this, and no other text:\n" +
    '<tool_call>[\n{"name": "func_name1", "arguments": {"argument1": "value1", "argument2": "value2"}},\n... (more calls as needed)\n]</tool_call>',
  newId: openaiCallId,
};
