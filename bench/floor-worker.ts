// A floor worker (bench/cases/verify.ts --mode floor-parallel): reads ranges of tenants' audit
// entries in (tenant_id, seq) order and hashes the canonical bytes, nothing else.
import { Database } from "bun:sqlite";
import { floorScan } from "./floor.ts";

declare var self: Worker;
let db: Database | null = null;

self.onmessage = (e: MessageEvent<{ dbPath: string } | { from: number; to: number }>) => {
  const msg = e.data;
  if ("dbPath" in msg) {
    db = new Database(msg.dbPath, { readonly: true });
    return;
  }
  self.postMessage(floorScan(db!, msg.from, msg.to));
};
