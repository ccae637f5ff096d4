import { homedir } from "node:os";
import { join } from "node:path";

/**
 * Where kiln keeps everything it downloads and builds.
 * `KILN_HOME` (default `~/.kiln`) holds `models/<slug>/` (source weights),
 * `artifacts/<slug>/<artifact-id>/` (compiled ONNX artifacts) and `kiln.sqlite` (records).
 */
export function kilnHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.KILN_HOME && env.KILN_HOME.length > 0 ? env.KILN_HOME : join(homedir(), ".kiln");
}

export function modelDir(slug: string, home = kilnHome()): string {
  return join(home, "models", slug);
}

export function artifactsDir(slug: string, home = kilnHome()): string {
  return join(home, "artifacts", slug);
}

export function databasePath(home = kilnHome()): string {
  return join(home, "kiln.sqlite");
}
