/**
 * Llama 3.1+ JSON tool calls: the whole answer is one `{"name": …, "parameters": …}` object (Meta's
 * documented JSON format for custom tools; one call per turn). An answer that starts with prose is
 * prose, even if a call-like object appears in it later.
 */
import { openaiCallId, type ToolDialect } from "./dialect.js";

export const llama3: ToolDialect = {
  name: "llama3",
  syntax: { open: "", close: "", pad: "", array: false, separator: "", argumentsKey: "parameters", atStartOnly: true, maxCalls: 1 },
  instructions: (tools) =>
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" +
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n' +
    tools.map((t) => JSON.stringify(t, null, 4)).join("\n\n"),
  newId: openaiCallId,
};
