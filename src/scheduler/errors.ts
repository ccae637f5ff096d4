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

/** A model that cannot fit the server's memory budget even with every other model it may unload unloaded. */
export class ModelTooLargeError extends Error {
  readonly code = "model_too_large";
  constructor(
    readonly slug: string,
    readonly neededBytes: number,
    readonly availableBytes: number,
    readonly budgetBytes: number,
  ) {
    super(
      `${slug} needs about ${mib(neededBytes)} MiB of memory to serve (weights and KV cache), and this server's memory budget of ${mib(budgetBytes)} MiB leaves at most ${mib(availableBytes)} MiB beside the models it keeps loaded`,
    );
    this.name = "ModelTooLargeError";
  }
}

function mib(bytes: number): number {
  return Math.ceil(bytes / 2 ** 20);
}
