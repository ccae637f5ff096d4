/** What every CLI command module exports (one command per file). */
export interface CommandIO {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown; isTTY?: boolean; columns?: number };
}

export interface Command {
  name: string;
  description: string;
  usage: string;
  /** Runs the command; resolves to the process exit code. */
  run(argv: string[], io?: CommandIO): Promise<number>;
}
