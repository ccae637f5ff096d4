/**
 * What a generation request says its output must be: chat's `response_format`, or the other
 * servers' extensions on both endpoints: vLLM's `guided_json`, `guided_regex`, `guided_choice`,
 * `guided_grammar` and `structured_outputs`, llama.cpp's `grammar` and `json_schema`. At most one
 * per request; it is checked while the body is parsed, before any work, so a constraint the engine
 * cannot enforce is a 400 naming the field rather than a failure mid-generation.
 */
import { z } from "zod";
import { checkConstraint, checkJsonSchema, ConstraintError, type ConstraintSpec } from "../../runtime/constrain/index.js";
import { apiError } from "../errors.js";
import type { ResponseFormat } from "./chat-completions.js";

/** The extensions' fields, spread into both endpoints' schemas. */
// A string too, since vLLM's clients often send the schema already serialized.
const schemaValue = z.union([z.record(z.string(), z.unknown()), z.string()]);

/** vLLM's `structured_outputs`: one of its constraints, and the flags that change nothing in kiln. */
const structuredOutputs = z.strictObject({
  json: schemaValue.nullish(),
  regex: z.string().nullish(),
  choice: z.array(z.string()).min(1).nullish(),
  grammar: z.string().nullish(),
  json_object: z.boolean().nullish(),
  /** kiln has one engine: nothing to fall back from. */
  disable_fallback: z.boolean().nullish(),
  /** kiln's schemas always refuse properties they do not list. */
  disable_additional_properties: z.boolean().nullish(),
});
type StructuredOutputs = z.output<typeof structuredOutputs>;
const STRUCTURED_KINDS = ["json", "regex", "choice", "grammar", "json_object"] as const;

export const constraintFields = {
  guided_json: schemaValue.nullish(),
  guided_regex: z.string().nullish(),
  guided_choice: z.array(z.string()).min(1).nullish(),
  /** vLLM's: a GBNF grammar. */
  guided_grammar: z.string().nullish(),
  /** vLLM's newer spelling of the `guided_*` fields. */
  structured_outputs: structuredOutputs.nullish(),
  /** llama.cpp's: a GBNF grammar ("" is none). */
  grammar: z.string().nullish(),
  /** llama.cpp's: a JSON schema. */
  json_schema: z.record(z.string(), z.unknown()).nullish(),
};

/** The fields of a parsed body that can constrain its output (`response_format` on chat only). */
export interface ConstraintFields {
  response_format?: ResponseFormat | null;
  guided_json?: Record<string, unknown> | string | null;
  guided_regex?: string | null;
  guided_choice?: string[] | null;
  guided_grammar?: string | null;
  structured_outputs?: StructuredOutputs | null;
  grammar?: string | null;
  json_schema?: Record<string, unknown> | null;
}

export type ConstraintParam =
  | "response_format"
  | "guided_json"
  | "guided_regex"
  | "guided_choice"
  | "guided_grammar"
  | "structured_outputs"
  | "grammar"
  | "json_schema";

/**
 * The one output constraint of a body that its endpoint's parse function accepted, or undefined
 * for free text. The constraint's checks ran in that parse, so this only maps the fields.
 */
export function requestConstraint(body: ConstraintFields): ConstraintSpec | undefined {
  const param = constraintField(body);
  return param === undefined ? undefined : specOf(body, param);
}

/**
 * Throws a 400 naming the field at fault when the body asks for more than one output constraint,
 * or for one the engine cannot enforce (a schema keyword it would ignore, a regex outside its
 * dialect, an empty choice).
 */
export function checkRequestConstraint(body: ConstraintFields): void {
  const param = constraintField(body);
  if (param === undefined) return;
  try {
    if (param === "response_format") {
      if (body.response_format?.type === "json_schema") checkJsonSchema(body.response_format.json_schema.schema ?? {});
    } else if (param === "guided_json") {
      checkJsonSchema(guidedSchema(body.guided_json!, param));
    } else if (param === "json_schema") {
      checkJsonSchema(body.json_schema);
    } else {
      checkConstraint(specOf(body, param));
    }
  } catch (err) {
    if (!(err instanceof ConstraintError)) throw err;
    throw constraintError(param, err);
  }
}

/** The constraint `format` asks for (`text` asks for none). */
export function responseFormatConstraint(format: ResponseFormat | null | undefined): ConstraintSpec | undefined {
  if (format?.type === "json_object") return { type: "json_object" };
  if (format?.type === "json_schema") return { type: "json_schema", schema: JSON.stringify(format.json_schema.schema ?? {}) };
  return undefined;
}

/** The Responses API's `text.format`, as far as the constraint goes. */
export type TextFormat = { type: "text" } | { type: "json_object" } | { type: "json_schema"; schema: Record<string, unknown> };

/**
 * The constraint the Responses API's `text.format` asks for (`text` asks for none), checked: a
 * schema the engine cannot enforce is a 400 naming `text.format`, as `response_format`'s is on chat.
 */
export function textFormatConstraint(format: TextFormat | null | undefined): ConstraintSpec | undefined {
  if (format?.type === "json_object") return { type: "json_object" };
  if (format?.type !== "json_schema") return undefined;
  try {
    checkJsonSchema(format.schema);
  } catch (err) {
    if (!(err instanceof ConstraintError)) throw err;
    const where = err.path === "" ? "the schema" : `the schema at '${err.path}'`;
    throw apiError("invalid_value", `Invalid 'text.format.schema': ${where}: ${err.message}`, "text.format");
  }
  return { type: "json_schema", schema: JSON.stringify(format.schema) };
}

/**
 * The constraint Ollama's `format` asks for: "json" any JSON object, an object a JSON schema ("" and
 * none ask for nothing), checked: a schema the engine cannot enforce is a 400 naming `format`.
 */
export function ollamaFormatConstraint(format: "json" | "" | Record<string, unknown> | null | undefined): ConstraintSpec | undefined {
  if (format === "json") return { type: "json_object" };
  if (format === "" || format === null || format === undefined) return undefined;
  try {
    checkJsonSchema(format);
  } catch (err) {
    if (!(err instanceof ConstraintError)) throw err;
    const where = err.path === "" ? "the schema" : `the schema at '${err.path}'`;
    throw apiError("invalid_value", `Invalid 'format': ${where}: ${err.message}`, "format");
  }
  return { type: "json_schema", schema: JSON.stringify(format) };
}

/**
 * The field that constrains the output, if one does, for errors about the constraint as a whole
 * (e.g. one that cannot go with tool calls); a second one is a 400 naming it.
 */
export function constraintField(body: ConstraintFields): ConstraintParam | undefined {
  const asked: ConstraintParam[] = [];
  if (body.response_format != null && body.response_format.type !== "text") asked.push("response_format");
  if (body.guided_json != null) asked.push("guided_json");
  if (body.guided_regex != null) asked.push("guided_regex");
  if (body.guided_choice != null) asked.push("guided_choice");
  if (body.guided_grammar != null) asked.push("guided_grammar");
  if (body.structured_outputs != null && structuredKind(body.structured_outputs) !== undefined) asked.push("structured_outputs");
  if (body.grammar != null && body.grammar !== "") asked.push("grammar");
  if (body.json_schema != null) asked.push("json_schema");
  if (asked.length > 1) {
    // Constraints do not compose: the engine holds each sequence to one grammar.
    throw apiError("invalid_value", `Only one output constraint per request: '${asked[1]}' cannot be combined with '${asked[0]}'.`, asked[1]);
  }
  return asked[0];
}

function specOf(body: ConstraintFields, param: ConstraintParam): ConstraintSpec {
  switch (param) {
    case "response_format":
      return responseFormatConstraint(body.response_format)!;
    case "guided_json":
      return { type: "json_schema", schema: JSON.stringify(guidedSchema(body.guided_json!, param)) };
    case "guided_regex":
      return { type: "regex", pattern: body.guided_regex! };
    case "guided_choice":
      return { type: "choice", choices: body.guided_choice! };
    case "guided_grammar":
      return { type: "grammar", grammar: body.guided_grammar! };
    case "grammar":
      return { type: "grammar", grammar: body.grammar! };
    case "json_schema":
      return { type: "json_schema", schema: JSON.stringify(body.json_schema) };
    case "structured_outputs":
      return structuredSpec(body.structured_outputs!);
  }
}

/** The one constraint `structured_outputs` holds, or undefined for none; a second is a 400 naming it. */
function structuredKind(value: StructuredOutputs): (typeof STRUCTURED_KINDS)[number] | undefined {
  const asked = STRUCTURED_KINDS.filter((k) => (k === "json_object" ? value[k] === true : value[k] != null));
  if (asked.length > 1) {
    throw apiError(
      "invalid_value",
      `Only one output constraint per request: 'structured_outputs.${asked[1]}' cannot be combined with 'structured_outputs.${asked[0]}'.`,
      "structured_outputs",
    );
  }
  return asked[0];
}

function structuredSpec(value: StructuredOutputs): ConstraintSpec {
  switch (structuredKind(value)!) {
    case "json":
      return { type: "json_schema", schema: JSON.stringify(guidedSchema(value.json!, "structured_outputs")) };
    case "regex":
      return { type: "regex", pattern: value.regex! };
    case "choice":
      return { type: "choice", choices: value.choice! };
    case "grammar":
      return { type: "grammar", grammar: value.grammar! };
    case "json_object":
      return { type: "json_object" };
  }
}

/** A schema sent as an object, or as a string holding one (`guided_json`, `structured_outputs.json`). */
function guidedSchema(value: Record<string, unknown> | string, param: ConstraintParam): Record<string, unknown> {
  if (typeof value !== "string") return value;
  let schema: unknown;
  try {
    schema = JSON.parse(value);
  } catch (err) {
    throw apiError("invalid_value", `Invalid '${param}': the string is not valid JSON (${(err as Error).message}).`, param);
  }
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) {
    throw apiError("invalid_value", `Invalid '${param}': expected a JSON schema object, or a string holding one.`, param);
  }
  return schema as Record<string, unknown>;
}

function constraintError(param: ConstraintParam, err: ConstraintError): Error {
  if (param === "response_format" || param === "guided_json" || param === "json_schema") {
    const field = param === "response_format" ? "response_format.json_schema.schema" : param;
    const where = err.path === "" ? "the schema" : `the schema at '${err.path}'`;
    return apiError("invalid_value", `Invalid '${field}': ${where}: ${err.message}`, param);
  }
  const where = err.path === "" ? "" : ` at '${err.path}'`;
  return apiError("invalid_value", `Invalid '${param}'${where}: ${err.message}`, param);
}
