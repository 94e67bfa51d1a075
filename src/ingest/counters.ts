// What the write API took in and refused since the process started: read by /metrics.
// Counters, so they only grow; a restart starts them at zero (Prometheus's rate()
// handles that).
import type { GroupStats } from "./group-commit.ts";

/** The write API's endpoints, as the counters name them. */
export type IngestKind = "audit" | "inlogpogingen" | "tenants" | "beheerders";

export interface IngestCounters {
  /** Requests answered 2xx, per endpoint. */
  accepted: Record<IngestKind, number>;
  /** Rows stored: audit entries and login attempts (not those answered from an earlier batch). */
  stored: { audit: number; inlogpogingen: number };
  /** Audit entries answered from an earlier batch with the same sleutel (a retry). */
  replayed: number;
  /** Requests refused, by HTTP status ("400", "401", "403", "409", "413", "422", "503", …). */
  rejected: Record<string, number>;
  /** Requests between the gate and their answer now (a gauge; at most MAX_WRITES_IN_FLIGHT, src/http/ingest-routes.ts). */
  inFlight: number;
  /** On SQLite: the write transactions committed, and the requests they stored (src/ingest/group-commit.ts). */
  sqlite: GroupStats;
}

export function newIngestCounters(): IngestCounters {
  return {
    accepted: { audit: 0, inlogpogingen: 0, tenants: 0, beheerders: 0 },
    stored: { audit: 0, inlogpogingen: 0 },
    replayed: 0,
    rejected: {},
    inFlight: 0,
    sqlite: { groups: 0, calls: 0 },
  };
}

export function countRejected(counters: IngestCounters, status: number): void {
  const key = String(status);
  counters.rejected[key] = (counters.rejected[key] ?? 0) + 1;
}
