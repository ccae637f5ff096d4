/**
 * Mistral's calls (v0.3 and later): `[TOOL_CALLS]` and a JSON array of `{"name", "arguments"}`. Its
 * templates demand call ids of exactly 9 letters and digits when a conversation is replayed, so
 * its calls get such ids.
 */
import { randomAlphanumeric, type ToolDialect } from "./dialect.js";

export const mistral: ToolDialect = {
  name: "mistral",
  syntax: { open: "[TOOL_CALLS]", close: "", pad: "", array: true, separator: ", ", argumentsKey: "arguments", atStartOnly: false },
  instructions: (tools) => `[AVAILABLE_TOOLS]${JSON.stringify(tools)}[/AVAILABLE_TOOLS]`,
  newId: () => randomAlphanumeric(9),
};
