/** `kiln rollback <slug>`: take a model's current promotion out of service. */
import { hasModel, UnknownModelError } from "../../catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../../catalogue/db.js";
import { currentPromotion, rollbackPromotion } from "../../catalogue/promotions.js";
import { defineCommand } from "../command.js";
import { option, UsageError } from "../options.js";

export default defineCommand({
  name: "rollback",
  description: "Take a model's promoted artifact out of service (the one before serves again)",
  intro: `Marks the promotion serving <slug> as rolled back in $KILN_HOME/kiln.sqlite: the promotion
before it serves again, or the default compile when there was none. A running \`kiln serve\` picks
it up. The history stays (\`kiln tracks\`); promote the artifact again to undo a rollback.
Promotions are per device: --device webgpu rolls back the GPU's.`,
  positionals: "<slug>",
  options: {
    device: option.choice(["cpu", "webgpu"], { default: "cpu", description: "the device whose promotion is rolled back" }),
  },
  async run({ positionals, options }, io) {
    const [slug, ...extra] = positionals;
    if (!slug) throw new UsageError("which model?");
    if (extra.length > 0) throw new UsageError(`unexpected argument ${extra[0]}`);
    if (!hasModel(slug)) throw new UsageError(new UnknownModelError(slug).message);
    const db = openDatabase();
    try {
      const said = rollBack(db, slug, options.device);
      if (said === null) {
        io.stderr.write(
          `kiln rollback: ${slug} has no promoted artifact${options.device === "cpu" ? "" : ` on ${options.device}`} (the default compile serves)\n`,
        );
        return 1;
      }
      io.stdout.write(`${said}\n`);
      return 0;
    } finally {
      db.close();
    }
  },
});

/** Takes `slug`'s current promotion out of service; says what serves now, or null when nothing was promoted. Shared with the web console's track page. */
export function rollBack(db: KilnDatabase, slug: string, device = "cpu"): string | null {
  const current = currentPromotion(db, slug, device);
  if (!current) return null;
  const now = rollbackPromotion(db, slug, device);
  return `${slug}: rolled back ${current.artifactId}; serving ${now ? `${now.artifactId} (promoted ${now.createdAt}: ${now.reason})` : "the default compile"}`;
}
