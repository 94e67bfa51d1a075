// Preloaded before every test file (bunfig.toml): on the PostgreSQL run (test/dialect.ts)
// the one cluster the files share is stopped after the last of them.
import { afterAll } from "bun:test";
import { stopSharedCluster } from "./dialect.ts";

afterAll(stopSharedCluster);
