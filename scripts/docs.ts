/**
 * `npm run docs`: writes docs/cli.md, the CLI reference rendered from the command declarations.
 * test/unit/cli/cli-reference.test.ts fails when the committed page differs from the rendering.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { COMMANDS } from "../src/cli/kiln.js";
import { renderCliReference } from "../src/cli/reference.js";

const path = fileURLToPath(new URL("../docs/cli.md", import.meta.url));
writeFileSync(path, renderCliReference(COMMANDS));
process.stdout.write(`wrote ${path}\n`);
