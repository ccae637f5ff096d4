/** `kiln rm <slug>...`: delete what kiln keeps of models under $KILN_HOME. */
import { footprintBytes, localFootprint, localSlugs, removeArtifacts, removeLocal } from "../../catalogue/local-store.js";
import { kilnHome } from "../../catalogue/paths.js";
import { formatBytes } from "../../catalogue/pull/progress.js";
import { defineCommand, type CommandIO } from "../command.js";
import { option, UsageError } from "../options.js";

export default defineCommand({
  name: "rm",
  description: "Delete a model's pulled weights and compiled artifacts from this machine",
  intro: `Deletes what kiln keeps of each model under $KILN_HOME: its pulled weights (models/<slug>/) and its
compiled artifacts (artifacts/<slug>/), and says how much was freed. With --artifacts the weights stay
and only the artifacts go: the next serve compiles the model again. A model compiled from a local
GGUF file has artifacts only. A running \`kiln serve\` keeps serving what it has loaded; its next load
of the model pulls it again (with --pull-on-demand) and compiles it. A promoted artifact deleted, the
default compile serves until the track promotes another. Records in kiln.sqlite (compiles, track
runs, promotions) stay. \`kiln models --local\` lists what is kept. --stale deletes only the artifacts
nothing will serve again: built by an earlier kiln's compiler and not promoted (now, or as the one a
rollback returns to), of the models named or, with none named, of every model.`,
  positionals: "<slug>...",
  options: {
    artifacts: option.flag({ description: "delete the compiled artifacts only, and keep the pulled weights" }),
    stale: option.flag({ description: "delete only the artifacts of earlier compilers that are not promoted; every model's when no slug is named" }),
  },
  async run({ positionals: slugs, options }, io) {
    if (options.stale) {
      if (options.artifacts) throw new UsageError("--stale deletes artifacts only already: leave out --artifacts");
      return removeStale(slugs, io);
    }
    if (slugs.length === 0) throw new UsageError("which model? (`kiln models --local` lists what is kept)");
    const home = kilnHome();
    let failed = false;
    for (const slug of slugs) {
      const removed = removeLocal(slug, home, options.artifacts ? "artifacts" : "all");
      if (!removed || (options.artifacts && removed.artifacts.length === 0)) {
        io.stderr.write(`kiln rm: no ${options.artifacts ? "compiled artifact" : "model"} '${slug}' is kept in ${home}\n`);
        failed = true;
        continue;
      }
      io.stdout.write(`${slug}: deleted ${describe(removed.weightsBytes, removed.artifacts.length)}, ${formatBytes(footprintBytes(removed))} freed\n`);
    }
    return failed ? 1 : 0;
  },
});

/** The stale artifacts of `slugs` (every kept model's when empty), deleted. */
async function removeStale(slugs: readonly string[], io: CommandIO): Promise<number> {
  const home = kilnHome();
  const { openDatabase } = await import("../../catalogue/db.js");
  const { staleArtifactIds } = await import("../../provision/stale-artifacts.js");
  const db = openDatabase();
  try {
    let deleted = 0;
    let failed = false;
    for (const slug of slugs.length > 0 ? slugs : localSlugs(home)) {
      const kept = localFootprint(slug, home);
      if (!kept) {
        io.stderr.write(`kiln rm: no model '${slug}' is kept in ${home}\n`);
        failed = true;
        continue;
      }
      const removed = removeArtifacts(slug, home, staleArtifactIds(kept, home, db));
      if (removed.artifacts.length === 0) continue;
      deleted += removed.artifacts.length;
      io.stdout.write(`${slug}: deleted ${describe(0, removed.artifacts.length)} of earlier compilers, ${formatBytes(footprintBytes(removed))} freed\n`);
    }
    if (deleted === 0 && !failed) io.stdout.write(`no stale artifact in ${home}\n`);
    return failed ? 1 : 0;
  } finally {
    db.close();
  }
}

/** "the weights and 2 artifacts", "1 artifact", "the weights". */
function describe(weightsBytes: number, artifacts: number): string {
  const parts = [...(weightsBytes > 0 ? ["the weights"] : []), ...(artifacts > 0 ? [`${artifacts} artifact${artifacts === 1 ? "" : "s"}`] : [])];
  return parts.length === 0 ? "an empty folder" : parts.join(" and ");
}
