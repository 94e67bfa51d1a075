// The second half of `npm test`: every test file that builds its installation through
// test/dialect.ts, run again on PostgreSQL (NACHTWACHT_TEST_DB=pg). The files that do not
// are either about one store only (SQLite's file, WAL, write lock and checkpointer; the
// pg-* files) or touch no database; docs/postgresql.md lists them.
//
// Each process of the run starts its own cluster on first use and names it in a folder
// of this run (CLUSTERS_ENV): with `--parallel`, Bun gives a process no hook after its
// last file, so the clusters are stopped here once `bun test` has ended, however it ended.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLUSTERS_ENV, stopClusterAt } from "./pg.ts";

const dir = join(import.meta.dir);
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".test.ts") && /from "\.\/dialect\.ts"/.test(readFileSync(join(dir, f), "utf8")))
  .sort()
  .map((f) => `./test/${f}`);
console.error(`npm test: ${files.length} test files again on PostgreSQL: ${files.map((f) => f.slice(7, -8)).join(", ")}`);
const registry = mkdtempSync(join(tmpdir(), "nachtwacht-pg-pass-"));
let exitCode = 1;
try {
  const p = Bun.spawnSync([process.execPath, "test", "--timeout", "30000", ...files, ...process.argv.slice(2)], {
    env: { ...process.env, NACHTWACHT_TEST_DB: "pg", [CLUSTERS_ENV]: registry },
    stdio: ["inherit", "inherit", "inherit"],
  });
  exitCode = p.exitCode ?? 1;
} finally {
  for (const pid of readdirSync(registry)) {
    try {
      stopClusterAt(readFileSync(join(registry, pid), "utf8"));
    } catch (e) {
      console.error(`npm test: could not stop the cluster of process ${pid}: ${e instanceof Error ? e.message : String(e)}`);
      exitCode ||= 1;
    }
  }
  rmSync(registry, { recursive: true, force: true });
}
process.exit(exitCode);
