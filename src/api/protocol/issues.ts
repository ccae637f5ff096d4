/**
 * Zod validation issues -> one OpenAI-style 400: the first problem, its field as a `param` path
 * (`messages[2].content`, `temperature`) and a message in the API's wording.
 */
import type { z } from "zod";
import { ApiError, apiError, type ErrorCode } from "../errors.js";

type Issue = z.core.$ZodIssue;
type Path = PropertyKey[];

/** `["messages", 2, "content"]` -> `messages[2].content`. */
export function paramPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out === "" ? String(key) : `.${String(key)}`;
  }
  return out;
}

/** Parses `input` with `schema`, throwing the first problem as a 400 ApiError. */
export function parseOrThrow<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    throw apiError("invalid_json", "The request body must be a JSON object.");
  }
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw issueToError(result.error.issues[0], [], input);
}

function issueToError(issue: Issue, prefix: Path, input: unknown): ApiError {
  const path = [...prefix, ...issue.path];
  if (issue.code === "invalid_union") {
    const picked = pickUnionBranch(issue.errors);
    if (picked) return issueToError(picked, path, input);
  }
  const param = paramPath(path);
  const value = valueAt(input, path);
  const name = `'${param}'`;
  if ((issue.code === "invalid_type" || issue.code === "invalid_union") && value === undefined) {
    return apiError("missing_required_parameter", `Missing required parameter: ${name}.`, param);
  }
  switch (issue.code) {
    case "invalid_type": {
      // "int" is checked on a number: a string here is a form field already read as one.
      const got = issue.expected === "int" ? formNumber(value) : value;
      return apiError("invalid_type", `Invalid type for ${name}: expected ${describeExpected(issue.expected)}, but got ${describeValue(got)} instead.`, param);
    }
    case "invalid_union": {
      // A discriminated union whose tag names no branch (`response_format.type: "xml"`): a value outside the list, not a shape.
      const options = "options" in issue ? issue.options : undefined;
      if (issue.discriminator !== undefined && options !== undefined && typeof value === "string") {
        return apiError("invalid_value", outsideList(name, value, options), param);
      }
      const expected = issue.errors.flatMap((branch) =>
        branch.filter((i) => i.code === "invalid_type").map((i) => describeExpected((i as { expected: string }).expected)),
      );
      const what = expected.length > 0 ? [...new Set(expected)].join(" or ") : "a valid value";
      return apiError("invalid_type", `Invalid type for ${name}: expected ${what}, but got ${describeValue(value)} instead.`, param);
    }
    case "too_small":
    case "too_big": {
      const limit = issue.code === "too_small" ? issue.minimum : issue.maximum;
      const op = issue.code === "too_small" ? (issue.inclusive ? ">=" : ">") : issue.inclusive ? "<=" : "<";
      if (issue.origin === "array") {
        const many = issue.code === "too_small" ? "at least" : "at most";
        const length = (value as unknown[]).length;
        const got = length === 0 ? "an empty array" : String(length);
        return apiError(
          "invalid_value",
          `Invalid ${name}: expected an array with ${many} ${String(limit)} ${Number(limit) === 1 ? "item" : "items"}, but got ${got}.`,
          param,
        );
      }
      if (issue.origin === "string") {
        return apiError("invalid_value", `Invalid ${name}: expected a string with length ${op} ${String(limit)}.`, param);
      }
      // A range is checked on a number: a string here is a form field already read as one.
      return apiError("invalid_value", `Invalid ${name}: expected a value ${op} ${String(limit)}, but got ${describeValue(formNumber(value))} instead.`, param);
    }
    case "invalid_value":
      return apiError("invalid_value", outsideList(name, value, issue.values), param);
    case "unrecognized_keys": {
      // A field inside an object the reference API defines whole (`response_format.schema`): refused, as it refuses it, rather than silently dropped.
      const unknown = paramPath([...path, issue.keys[0]]);
      return apiError("unknown_parameter", `Unknown parameter: '${unknown}'.`, unknown);
    }
    case "custom": {
      const code = (issue.params?.code as ErrorCode | undefined) ?? "invalid_value";
      return apiError(code, issue.message, param);
    }
    default:
      return apiError("invalid_value", `Invalid ${name}: ${issue.message}.`, param);
  }
}

/**
 * For a failed union, the branch that got furthest: branches whose only problem is a type
 * mismatch at the union's own level are ruled out (the value is of another shape). Returns
 * undefined when every branch is such a mismatch.
 */
function pickUnionBranch(branches: Issue[][]): Issue | undefined {
  const deeper = branches.filter((issues) => !issues.every((i) => i.code === "invalid_type" && i.path.length === 0));
  return deeper.length > 0 ? deeper[0][0] : undefined;
}

/** A form field's number as the schema read it (multipart fields arrive as strings); any other value as it is. */
function formNumber(value: unknown): unknown {
  return typeof value === "string" && value.trim() !== "" && Number.isFinite(Number(value)) ? Number(value) : value;
}

function valueAt(input: unknown, path: Path): unknown {
  let at: unknown = input;
  for (const key of path) {
    if (at === null || typeof at !== "object") return undefined;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at;
}

const EXPECTED: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  boolean: "a boolean",
  array: "an array",
  object: "an object",
  record: "an object",
};

function describeExpected(expected: string): string {
  return EXPECTED[expected] ?? expected;
}

/**
 * A value of the right type that is not among the field's values, named as the reference API does
 * ("Invalid value: 'robot'. Supported values are: ..."): saying it "got a string" would only confuse
 * when a string was asked for.
 */
function outsideList(name: string, value: unknown, supported: readonly unknown[]): string {
  const shown = typeof value === "string" ? (value.length <= 40 ? `'${value}'` : `'${value.slice(0, 40)}…'`) : describeValue(value);
  const list = supported.map((v) => (typeof v === "string" ? `'${v}'` : JSON.stringify(v)));
  const listed = list.length > 1 ? `${list.slice(0, -1).join(", ")} and ${list.at(-1)}` : list.join("");
  return `Invalid value for ${name}: ${shown}. Supported values are: ${listed}.`;
}

function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return value.length <= 40 ? `a string ('${value}')` : "a string";
  if (typeof value === "number") return Number.isInteger(value) ? `${value}` : `${value}`;
  if (typeof value === "boolean") return `a boolean (${value})`;
  if (typeof value === "object") return "an object";
  return typeof value;
}
