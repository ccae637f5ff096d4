/** `kiln compiler`: the nightly optimization tracks on their own, until SIGTERM. */
import { hasModel, UnknownModelError } from "../../catalogue/catalogue.js";
import { localSlugs } from "../../catalogue/local-store.js";
import { kilnHome } from "../../catalogue/paths.js";
import { jobsDir } from "../../track/job.js";
import { startNightly } from "../../track/nightly.js";
import { defineCommand } from "../command.js";
import { option, UsageError } from "../options.js";

export default defineCommand({
  name: "compiler",
  description: "Run the nightly optimization tracks on their schedules (until SIGTERM)",
  intro: `Schedules the jobs of compiler-jobs/ at their cron expressions, local time, and runs each as
its own \`kiln track run <slug>\` process at a lower CPU priority, one at a time; a job that fires
while another runs waits for it. Without --model, a job runs only while this machine holds its model
(pulled or compiled: a job never pulls one by itself), and is skipped with a log line otherwise.
For a machine apart from the servers: they pick up promotions from the shared
$KILN_HOME/kiln.sqlite. \`kiln serve\` runs the same scheduler itself unless --no-nightly. SIGTERM or
Ctrl-C stops the running job (its measurement in progress is recorded as failed) and exits.`,
  options: {
    model: option.string({
      short: "m",
      value: "<slug>",
      multiple: true,
      description: "only this model's job, run whether or not the model is here yet. Default: the job of every model this machine holds",
    }),
    threads: option.integer({ min: 1, max: 256, description: "onnxruntime threads a measurement may use. Default: each job's threadBudget" }),
    jobs: option.string({ value: "<dir>", env: "KILN_JOBS", description: "folder of the job files (<slug>.json). Default: compiler-jobs/ of this kiln" }),
  },
  async run({ options }, io) {
    for (const slug of options.model) if (!hasModel(slug)) throw new UsageError(new UnknownModelError(slug).message);
    const log = (line: string) => io.stderr.write(`${new Date().toISOString()} ${line}\n`);
    const named = options.model.length > 0;
    const home = kilnHome();
    const stopNightly = startNightly({
      jobsDir: options.jobs ?? jobsDir(),
      slugs: named ? options.model : undefined,
      // Unnamed, only what this machine holds: a job never pulls a model of the catalogue's tens of gigabytes by itself.
      ...(named
        ? {}
        : {
            wanted: (slug: string) => localSlugs(home).includes(slug),
            unwantedReason: `not on this machine (\`kiln pull\` it to track it)`,
            wantedWhen: "for a model this machine holds",
          }),
      threadBudget: options.threads,
      onLog: log,
    });
    await new Promise<void>((resolve) => {
      const onSignal = (signal: NodeJS.Signals) => {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
        log(`kiln compiler: ${signal}: stopping`);
        resolve();
      };
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    });
    await stopNightly();
    log("kiln compiler: stopped");
    return 0;
  },
});
