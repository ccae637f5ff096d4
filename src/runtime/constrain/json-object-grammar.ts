/**
 * The grammar for `response_format: {type: "json_object"}`: one JSON object, compact (no whitespace
 * outside strings). The engine's builtin JSON grammar is not used: it also allows a top-level array
 * and unbounded whitespace between tokens, on which a small model can loop until max_tokens.
 * Strings follow the engine's own JSON rules (right-recursive, with a lookahead after the closing
 * quote, which keeps mask computation fast).
 */
export const JSON_OBJECT_EBNF = String.raw`root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" "}" | "{" member ("," member)* "}"
member ::= string ":" value
array ::= "[" "]" | "[" value ("," value)* "]"
string ::= "\"" string_rest
string_rest ::= ("\"" | [^\0-\x1f\"\\] string_rest | "\\" escape string_rest) (= [,}\]:])
escape ::= ["\\/bfnrt] | "u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
`;
