// `npm test` runs this first (package.json "pretest"): every test runs, none is skipped,
// so a missing program stops the run here, naming the Debian packages that bring it.
// `.ci/run` (as root) installs them with apt.
import { existsSync } from "node:fs";
import { postgresBinDir } from "./pg.ts";

const ok = (cmd: string[]) => Bun.spawnSync(cmd, { stdout: "ignore", stderr: "ignore" }).exitCode === 0;
const has = (program: string) => Bun.which(program) !== null;

const needs: [boolean, string][] = [
  [has("chromium"), "chromium"],
  [has("curl"), "curl"],
  [has("go"), "golang-go"],
  [existsSync("/usr/share/gocode/src/golang.org/x/mod/sumdb"), "golang-golang-x-mod-dev"],
  [has("prometheus") && has("promtool"), "prometheus"],
  [has("python3"), "python3"],
  [has("jq"), "jq"],
  // test/durable-file.test.ts traces `nachtwacht backup` and `export`: fsync before rename.
  [has("strace"), "strace"],
  [has("php") && ok(["php", "-r", 'exit(function_exists("curl_init") ? 0 : 1);']), "php-cli php-curl"],
  // test/listener-owner.test.ts runs its listener as `nobody` when the tests run as root.
  [process.getuid?.() !== 0 || has("setpriv"), "util-linux"],
  // The PostgreSQL tests start their own throw-away cluster (test/pg.ts); as root it runs as `postgres`.
  [postgresBinDir() !== null && (process.getuid?.() !== 0 || has("runuser")), "postgresql"],
];
const missing = needs.filter(([present]) => !present).map(([, pkg]) => pkg);
if (missing.length > 0) {
  console.error(`npm test: missing Debian packages: ${missing.join(" ")}\n  install them: sudo apt-get install -y ${missing.join(" ")}   (or: sudo bash .ci/run)`);
  process.exit(1);
}
