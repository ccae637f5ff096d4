/** A worker-thread entry for the WorkerThread test: it answers the load message and echoes the rest. */
export default function echo(message: { op: string; fail?: boolean; bytes?: Uint8Array }): unknown {
  if (message.op === "load" && message.fail) throw new Error("load failed on purpose");
  if (message.op === "load") return { cwd: process.cwd(), typescript: import.meta.url.endsWith(".ts") };
  return { op: message.op, length: message.bytes?.length ?? 0 };
}
