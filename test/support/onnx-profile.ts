/**
 * onnxruntime's profiles (Chrome trace JSON, as `enableProfiling` writes them), read for the nodes a
 * session ran: which provider ran each, and the copies between the device and the host.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** One node's run in a profile. */
export interface ProfiledNode {
  /** The node's name. */
  node: string;
  /** Its operator ("MemcpyToHost" for a copy from the device). */
  op: string;
  /** The execution provider that ran it ("WebGpuExecutionProvider", "CPUExecutionProvider"). */
  provider: string;
}

interface TraceEvent {
  cat: string;
  name: string;
  args?: { op_name?: string; provider?: string };
}

/** The trace events of the profiles in `dir` whose file names start with `prefix`. */
function traceEvents(dir: string, prefix: string): TraceEvent[] {
  return readdirSync(dir)
    .filter((file) => file.startsWith(prefix) && file.endsWith(".json"))
    .flatMap((file) => JSON.parse(readFileSync(join(dir, file), "utf8")) as TraceEvent[]);
}

/** Every node run recorded by the profiles in `dir` whose file names start with `prefix` (all of them by default). */
export function profiledNodes(dir: string, prefix = ""): ProfiledNode[] {
  return traceEvents(dir, prefix)
    .filter((e) => e.cat === "Node" && e.name.endsWith("_kernel_time"))
    .map((e) => ({ node: e.name.slice(0, -"_kernel_time".length), op: e.args?.op_name ?? "", provider: e.args?.provider ?? "" }));
}

/** How many of `nodes` ran on `provider`. */
export const ranOn = (nodes: ProfiledNode[], provider: string): number => nodes.filter((n) => n.provider === provider).length;

/** The nodes that copied a value from the device back to the host: a CPU node reading what the device computed. */
export const copiesFromDevice = (nodes: ProfiledNode[]): string[] => nodes.filter((n) => n.op === "MemcpyToHost").map((n) => n.node);

/**
 * The operator of every GPU kernel (compute dispatch) the WebGPU provider recorded in the profiles in
 * `dir` whose file names start with `prefix`: one node may run several ("node&op&program" events).
 */
export function profiledKernelOps(dir: string, prefix = ""): string[] {
  return traceEvents(dir, prefix)
    .filter((e) => e.cat === "Api")
    .map((e) => e.name.split("&")[1] ?? e.name);
}
