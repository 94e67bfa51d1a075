// Preloaded before every test file (bunfig.toml). On the PostgreSQL run (test/dialect.ts),
// the one cluster the files share is stopped after the last of them.
import { afterAll, setDefaultTimeout } from "bun:test";
import { stopSharedCluster } from "./dialect.ts";

afterAll(stopSharedCluster);

// bunfig.toml's [test] timeout is not applied by this Bun (1.4.5: a test still stops at
// 5 s), so the suite's default is set here; the slow files set their own as before.
setDefaultTimeout(30_000);
