/**
 * The grammar for `response_format: {type: "json_object"}`: one JSON object. The engine's builtin
 * JSON grammar is not used: it also allows a top-level array and unbounded whitespace between
 * tokens, on which a small model can loop until max_tokens. JSON's optional whitespace is allowed
 * in the small bounded amounts of llama.cpp's JSON grammar ({@link JSON_WS_EBNF}: a space, or a
 * newline and an indent), so a model may write `"key": value` as it was trained to rather than be
 * forced into the compact form; numbers' digits are bounded as llama.cpp bounds them
 * ({@link JSON_NUMBER_EBNF}). Strings follow the engine's own JSON rules (right-recursive, with a
 * lookahead after the closing quote, which keeps mask computation fast).
 */

/** Where JSON allows whitespace: nothing, one space, or a newline and up to 20 spaces or tabs of indent (llama.cpp's `ws`). */
export const JSON_WS_EBNF = String.raw`"" | " " | "\n" [ \t]{0,20}`;

/**
 * A JSON number with at most 16 integer digits and 16 fraction digits, and an exponent of at most
 * 16 digits (llama.cpp's `integral-part` and `decimal-part`): an unbounded number is where a small
 * model, once it starts repeating a digit, never stops.
 */
export const JSON_INTEGRAL_EBNF = String.raw`"0" | [1-9] [0-9]{0,15}`;
export const JSON_NUMBER_EBNF = String.raw`"-"? json_integral ("." [0-9]{1,16})? ([eE] [+-]? json_integral)?`;

export const JSON_OBJECT_EBNF = String.raw`root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}" | "{" ws member ("," ws member)* ws "}"
member ::= string ":" ws value
array ::= "[" ws "]" | "[" ws value ("," ws value)* ws "]"
string ::= "\"" string_rest
string_rest ::= ("\"" | [^\0-\x1f\"\\] string_rest | "\\" escape string_rest) (= [ \t\n]* [,}\]:])
escape ::= ["\\/bfnrt] | "u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]
number ::= ${JSON_NUMBER_EBNF}
json_integral ::= ${JSON_INTEGRAL_EBNF}
ws ::= ${JSON_WS_EBNF}
`;
