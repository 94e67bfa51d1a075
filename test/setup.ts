// Preloaded before every test file (bunfig.toml). On the PostgreSQL run (test/dialect.ts),
// the one cluster the files share is stopped after the last of them (under test/pg-pass.ts,
// which runs several processes, by test/pg-pass.ts: see test/dialect.ts).
import { afterAll, setDefaultTimeout } from "bun:test";
import { stopSharedCluster } from "./dialect.ts";

afterAll(stopSharedCluster);

// bunfig.toml's [test] timeout is not applied by this Bun (1.4.5: a test still stops at
// 5 s), and a default set here reaches only the first file of a run (measured: a 6 s test
// in the second file stopped at 5 s): so `npm test` and test/pg-pass.ts pass
// `--timeout 30000`, and this covers a run of one file (`bun test test/x.test.ts`). The
// slow files set their own as before.
setDefaultTimeout(30_000);
