/**
 * The character classes of a schema's grammar as JSON text allows them. The engine's JSON-schema
 * compiler writes a string's characters raw: its unbounded strings leave out control characters,
 * quotes and backslashes, but its length-bounded strings (`minLength`, `maxLength`), a pattern's
 * `.` and a pattern's negated classes do not, so a model could write a raw newline, control
 * character or quote inside a string, which is not JSON. Every negated class here also leaves out
 * U+0000-U+001F, `"` and `\`, and the engine's any-character class becomes the class of characters
 * a JSON string holds unescaped. A string such a class would have let through needs an escape,
 * which these rules never write, so the value cannot hold it: the grammar gives up those values
 * rather than writing invalid JSON. Positive classes are left as they are (a pattern naming a quote
 * or a backslash in one can still write it raw).
 */

/** What a negated class leaves out on top of its own members, in the engine's EBNF. */
const NOT_IN_JSON_TEXT = String.raw`\0-\x1f\"\\`;
/** The engine's class for any character (a pattern's `.`). */
const ANY_CHARACTER = String.raw`[\0-\U0010ffff]`;

/** `ebnf` (the engine's EBNF of a JSON schema) with every negated class and any-character class limited to characters JSON text holds raw. */
export function jsonStringClasses(ebnf: string): string {
  let out = "";
  let i = 0;
  while (i < ebnf.length) {
    const ch = ebnf[i];
    if (ch === '"') {
      const end = closing(ebnf, i + 1, '"');
      out += ebnf.slice(i, end + 1);
      i = end + 1;
    } else if (ch === "[") {
      const end = closing(ebnf, i + 1, "]");
      out += jsonClass(ebnf.slice(i, end + 1));
      i = end + 1;
    } else {
      out += ch;
      i++;
    }
  }
  return out;
}

/** One class, `[...]` with its brackets, as JSON text allows it. */
function jsonClass(cls: string): string {
  if (cls === ANY_CHARACTER) return `[^${NOT_IN_JSON_TEXT}]`;
  if (!cls.startsWith("[^") || cls.startsWith(`[^${NOT_IN_JSON_TEXT}`)) return cls;
  return `[^${NOT_IN_JSON_TEXT}${cls.slice(2)}`;
}

/** Index of the unescaped `close` at or after `from` (a literal's closing quote or a class's closing bracket). */
function closing(text: string, from: number, close: string): number {
  for (let i = from; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === close) return i;
  }
  throw new Error(`an unclosed ${close === '"' ? "literal" : "class"} in the schema's grammar`);
}
