/** A CommandIO that keeps what a command writes, for the CLI tests. */
export function capture() {
  const out = { stdout: "", stderr: "" };
  const io = {
    stdout: { write: (s: string) => (out.stdout += s) },
    stderr: { write: (s: string) => (out.stderr += s), isTTY: false },
  };
  return { out, io };
}
