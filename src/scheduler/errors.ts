/** Errors the scheduler raises; each carries a stable `code` the API maps to an HTTP answer. */

/** The waiting queue of a model is full: the caller should retry later. */
export class OverloadedError extends Error {
  readonly code = "overloaded";
  constructor(
    readonly slug: string,
    readonly waiting: number,
  ) {
    super(`${slug} is overloaded: ${waiting} requests are already waiting; retry later`);
    this.name = "OverloadedError";
  }
}

/** The engine no longer takes requests (the server is shutting down). */
export class EngineClosedError extends Error {
  readonly code = "shutting_down";
  constructor(readonly slug: string) {
    super(`${slug} is shutting down and takes no new requests`);
    this.name = "EngineClosedError";
  }
}
