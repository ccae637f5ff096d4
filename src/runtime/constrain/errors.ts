/** A schema kiln cannot enforce, or an invalid one: `path` is a JSON pointer inside the schema ("" for the root), `keyword` the offending keyword when there is one. */
export class ConstraintError extends Error {
  readonly path: string;
  readonly keyword: string | undefined;

  constructor(message: string, path = "", keyword?: string) {
    super(message);
    this.name = "ConstraintError";
    this.path = path;
    this.keyword = keyword;
  }
}
