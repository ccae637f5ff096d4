/**
 * scripts/vulkan-install.sh's two decisions, run on fake apt configurations: whether an installed
 * Mesa is recent enough for Dawn, and the bookworm-backports source it would add, taken from the
 * archive that already serves bookworm. Neither prints anything but its answer or changes anything.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

const SCRIPT = resolve("scripts/vulkan-install.sh");
/** A reserved name that reaches nothing: the script copies whatever archive the system names. */
const ARCHIVE = "http://archive.invalid/debian";

let aptEtc: string;
beforeEach(() => {
  aptEtc = mkdtempSync(join(tmpdir(), "kiln-apt-"));
  mkdirSync(join(aptEtc, "sources.list.d"));
});
afterEach(() => rmSync(aptEtc, { recursive: true, force: true }));

function run(...args: string[]) {
  const r = spawnSync("bash", [SCRIPT, ...args], { env: { ...process.env, APT_ETC: aptEtc }, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("vulkan-install.sh", () => {
  it("takes Mesa 25 and newer, not Debian 12's own 22.3", () => {
    expect(run("--mesa-ok", "25.0.7-2~bpo12+1").status).toBe(0);
    expect(run("--mesa-ok", "25.2.1-1").status).toBe(0);
    expect(run("--mesa-ok", "22.3.6-1+deb12u1").status).toBe(1);
    expect(run("--mesa-ok", "24.3.4-3").status).toBe(1);
  });

  it("adds backports from the deb822 stanza that serves bookworm, with its key, past comments and other suites", () => {
    writeFileSync(join(aptEtc, "sources.list.d/a-other.sources"), "Types: deb\nURIs: http://other.invalid/repo\nSuites: nodistro\nComponents: main\n");
    writeFileSync(
      join(aptEtc, "sources.list.d/debian.sources"),
      [
        "Types: deb",
        "# a comment naming http://elsewhere.invalid",
        `URIs: ${ARCHIVE}`,
        "Suites: bookworm bookworm-updates",
        "Components: main",
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "",
        "Types: deb",
        "URIs: http://security.invalid/debian-security",
        "Suites: bookworm-security",
        "Components: main",
        "",
      ].join("\n"),
    );
    const r = run("--backports-source", "bookworm");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      `Types: deb\nURIs: ${ARCHIVE}\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n`,
    );
  });

  it("reads a one-line sources.list, options and all", () => {
    writeFileSync(
      join(aptEtc, "sources.list"),
      `# deb http://old.invalid/debian bookworm main\ndeb-src ${ARCHIVE} bookworm main\ndeb [arch=amd64 signed-by=/etc/keys/debian.gpg] ${ARCHIVE} bookworm main contrib\n`,
    );
    expect(run("--backports-source", "bookworm").stdout).toBe(
      `Types: deb\nURIs: ${ARCHIVE}\nSuites: bookworm-backports\nComponents: main\nSigned-By: /etc/keys/debian.gpg\n`,
    );
  });

  it("says so, and fails, when no source serves bookworm", () => {
    const r = run("--backports-source", "bookworm");
    expect(r.status).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe("vulkan: no apt source serves bookworm: add bookworm-backports to apt's sources by hand\n");
  });
});
