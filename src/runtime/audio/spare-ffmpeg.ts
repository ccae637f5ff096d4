/**
 * One ffmpeg process started ahead of need and waiting on its stdin for the next upload. ffmpeg's
 * own start (loading its libraries: 60-100 ms on the development VM, most of what decoding a short
 * clip costs) is then paid while the server waits or transcribes, not while a request waits. The
 * spare neither keeps Node's event loop alive nor outlives the server: its stdin closes with the
 * process, and ffmpeg ends on the empty input.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";

export type FfmpegChild = ChildProcessByStdio<Writable, Readable, Readable>;

interface Spare {
  key: string;
  child: FfmpegChild;
}

let spare: Spare | undefined;

/** The waiting ffmpeg if it was started as `command args` and is still alive (a new spare is started either way); else undefined. */
export function takeSpareFfmpeg(command: string, args: readonly string[]): FfmpegChild | undefined {
  const key = [command, ...args].join("\0");
  const taken = spare?.key === key && spare.child.exitCode === null && spare.child.signalCode === null ? spare.child : undefined;
  if (taken) setWaiting(taken, false);
  else spare?.child.kill("SIGKILL");
  spare = undefined;
  startSpareFfmpeg(command, args);
  return taken;
}

/** Starts a spare ffmpeg as `command args` unless one is waiting. */
export function startSpareFfmpeg(command: string, args: readonly string[]): void {
  if (spare) return;
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"], shell: false });
  const entry: Spare = { key: [command, ...args].join("\0"), child };
  const forget = () => {
    if (spare === entry) spare = undefined;
  };
  // A spare that cannot start (no ffmpeg) or dies while waiting is dropped; the decode that comes
  // next starts ffmpeg itself and reports what goes wrong.
  child.on("error", forget);
  child.on("exit", forget);
  child.stdin.on("error", () => {});
  setWaiting(child, true);
  spare = entry;
}

/** While it waits, the spare and its pipes do not hold the event loop open; once taken, they do. */
function setWaiting(child: FfmpegChild, waiting: boolean): void {
  const handles = [child, child.stdin, child.stdout, child.stderr] as Array<{ ref?: () => void; unref?: () => void }>;
  for (const h of handles) (waiting ? h.unref : h.ref)?.call(h);
}
