/**
 * Tool calling on the wire: `tools` (function definitions), `tool_choice` and `parallel_tool_calls`,
 * checked here, and turned into the scheduler's {@link ToolUse}.
 */
import { z } from "zod";
import { checkJsonSchema, ConstraintError } from "../../runtime/constrain/index.js";
import type { ToolFunction, ToolUse } from "../../scheduler/index.js";
import { apiError } from "../errors.js";

/** Most tools per request, as in the reference API. */
export const MAX_TOOLS = 128;

export const toolDefinition = z.object({
  type: z.literal("function"),
  // Strict, as the reference API is: a misspelled `parameters` would silently leave the calls unconstrained.
  function: z.strictObject({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, underscores or dashes"),
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
});

export const toolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.object({ type: z.literal("function"), function: z.object({ name: z.string().min(1) }) }),
]);

/** The chat request's tool fields, spread into its schema. */
export const toolFields = {
  tools: z.array(toolDefinition).max(MAX_TOOLS).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
};

type ToolFields = z.output<z.ZodObject<typeof toolFields>>;

/**
 * Chat's deprecated function calling, which the reference API still answers: `functions` (plain
 * function definitions) and `function_call` (`none`, `auto` or `{name}`). The model calls at most one
 * function, and the answer has the legacy shape (`message.function_call`, finish reason
 * `function_call`).
 */
export const legacyFunctionFields = {
  functions: z.array(toolDefinition.shape.function).max(MAX_TOOLS).nullish(),
  function_call: z.union([z.enum(["none", "auto"]), z.object({ name: z.string().min(1) })]).nullish(),
};

type LegacyFunctionFields = z.output<z.ZodObject<typeof legacyFunctionFields>>;

/** `functions` and `tools` are two spellings of one offer: a request uses one of them. */
export function checkLegacyFunctions(body: ToolFields & LegacyFunctionFields): void {
  const legacy = body.functions != null || body.function_call != null;
  if (!legacy) return;
  const both = body.tools != null ? "tools" : body.tool_choice != null ? "tool_choice" : body.parallel_tool_calls != null ? "parallel_tool_calls" : null;
  if (both !== null) {
    throw apiError(
      "invalid_value",
      `'${both}' and the deprecated 'functions'/'function_call' cannot be combined: send 'tools' and 'tool_choice' alone.`,
      body.functions != null ? "functions" : "function_call",
    );
  }
}

/** Whether the request offers functions in the deprecated legacy shape (so the answer is in that shape too). */
export function usesLegacyFunctions(body: LegacyFunctionFields): boolean {
  return body.functions != null;
}

/**
 * What the request asks of tool calling, checked: undefined when the model is not to call tools
 * (no tools, or `tool_choice: "none"`). Throws a 400 naming the field at fault: duplicate names, a
 * `parameters` schema kiln cannot enforce, a named choice that is not among the tools, a choice
 * without tools.
 */
export function toolUseOf(body: ToolFields & Partial<LegacyFunctionFields>): ToolUse | undefined {
  if (body.functions != null || body.function_call != null) {
    // One call at most: the legacy answer has room for one.
    return functionToolUse(body.functions ?? [], body.function_call, false, (i, field) => `functions[${i}].${field}`, LEGACY_NAMES);
  }
  const choice = body.tool_choice;
  return functionToolUse(
    (body.tools ?? []).map((t) => t.function),
    typeof choice === "object" && choice !== null ? { name: choice.function.name } : choice,
    body.parallel_tool_calls,
    (i, field) => `tools[${i}].function.${field}`,
  );
}

/** How the body names its offer and its choice, for the errors. */
interface OfferNames {
  tools: string;
  choice: string;
}

const TOOL_NAMES: OfferNames = { tools: "tools", choice: "tool_choice" };
const LEGACY_NAMES: OfferNames = { tools: "functions", choice: "function_call" };

/** A function a request offers, whichever endpoint's shape it came in. */
export interface OfferedFunction {
  name: string;
  description?: string | null;
  parameters?: Record<string, unknown> | null;
}

/** A `tool_choice`, whichever endpoint's shape it came in: a named function is `{name}`. */
export type OfferedChoice = "none" | "auto" | "required" | { name: string } | null | undefined;

/**
 * {@link toolUseOf} for functions and a choice already read out of an endpoint's own shapes (chat's
 * `tools[i].function`, the Responses API's flat `tools[i]`); `param` names a function's field in
 * the body, for the errors.
 */
export function functionToolUse(
  offered: readonly OfferedFunction[],
  toolChoice: OfferedChoice,
  parallelToolCalls: boolean | null | undefined,
  param: (index: number, field: "name" | "parameters") => string,
  names: OfferNames = TOOL_NAMES,
): ToolUse | undefined {
  const choice = toolChoice ?? "auto";
  if (offered.length === 0) {
    if (toolChoice !== null && toolChoice !== undefined && choice !== "none") {
      throw apiError(
        "invalid_value",
        `Invalid value for '${names.choice}': '${names.choice}' is only allowed when '${names.tools}' are specified.`,
        names.choice,
      );
    }
    return undefined;
  }
  const seen = new Set<string>();
  const functions: ToolFunction[] = offered.map(({ name, description, parameters }, i) => {
    if (seen.has(name)) throw apiError("invalid_value", `Invalid '${names.tools}': the function name '${name}' appears more than once.`, param(i, "name"));
    seen.add(name);
    const schema = parameters ?? { type: "object", properties: {} };
    checkParameters(schema, param(i, "parameters"));
    return { name, ...(description ? { description } : {}), parameters: schema };
  });
  if (choice === "none") return undefined;
  if (typeof choice === "object" && !seen.has(choice.name)) {
    throw apiError("invalid_value", `Invalid value for '${names.choice}': no function named '${choice.name}' is in '${names.tools}'.`, names.choice);
  }
  return { tools: functions, choice, parallel: parallelToolCalls ?? true };
}

/** A function's `parameters` must be an object schema kiln can enforce (its calls are constrained by it). */
function checkParameters(schema: Record<string, unknown>, param: string): void {
  if (schema.type !== undefined && schema.type !== "object") {
    throw apiError("invalid_value", `Invalid '${param}': a function's parameters must be a JSON schema of type 'object'.`, param);
  }
  try {
    checkJsonSchema(schema);
  } catch (err) {
    if (!(err instanceof ConstraintError)) throw err;
    const where = err.path === "" ? "the schema" : `the schema at '${err.path}'`;
    throw apiError("invalid_value", `Invalid '${param}': ${where}: ${err.message}`, param);
  }
}
