// The second half of `npm test`: every test file that builds its installation through
// test/dialect.ts, run again on PostgreSQL (NACHTWACHT_TEST_DB=pg). The files that do not
// are either about one store only (SQLite's file, WAL, write lock and checkpointer; the
// pg-* files) or touch no database; docs/postgresql.md lists them.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const dir = join(import.meta.dir);
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".test.ts") && /from "\.\/dialect\.ts"/.test(readFileSync(join(dir, f), "utf8")))
  .sort()
  .map((f) => `./test/${f}`);
console.error(`npm test: ${files.length} test files again on PostgreSQL: ${files.map((f) => f.slice(7, -8)).join(", ")}`);
const p = Bun.spawnSync([process.execPath, "test", "--timeout", "30000", ...files, ...process.argv.slice(2)], {
  env: { ...process.env, NACHTWACHT_TEST_DB: "pg" },
  stdio: ["inherit", "inherit", "inherit"],
});
process.exit(p.exitCode ?? 1);
