// audit-verificatie (contract §3): verifies every tenant's hash chain, streaming, and
// keeps each tenant's latest result for the reports. A broken chain is 409 and one
// alarm per run naming the broken tenants.
import { loadHeadAnchors, withAnchorSignatures } from "../audit/anchors.ts";
import { verifyTenants, workerCount, type TenantTask } from "../audit/verify-parallel.ts";
import type { ChainBreak } from "../audit/verify.ts";
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

export type VerificatieResultaat = {
  tenantId: number;
  tenant: string;
  intact: boolean;
  aantalEntries: number;
  fout?: ChainBreak;
};

export type VerificatieBody = {
  gecontroleerd: number;
  aantalGebroken: number;
  resultaten: VerificatieResultaat[];
  tijdstip: string;
};

/** At most this many broken tenants are listed in the alarm's context. */
const MAX_IN_ALARM = 50;

export interface VerificatieOptions {
  /** Worker threads; by default none below 200k entries, else up to 4 (one per core). */
  workers?: number;
}

export async function runAuditVerificatie(deps: Deps, now: Date, o: VerificatieOptions = {}): Promise<JobResult<VerificatieBody>> {
  const { sqlite } = deps.store;
  const tenants = sqlite.query("SELECT id, naam FROM tenants ORDER BY id").all() as { id: number; naam: string }[];
  // Head anchors (audit-anker); with AUDIT_ANKER_SLEUTEL set only validly signed ones
  // are passed on, and an invalid signature breaks the chain (anker-afwijkend).
  const headAnchors = new Map(tenants.map((t) => [t.id, loadHeadAnchors(sqlite, t.id, deps.config.auditAnkerSleutel)]));
  // No retentionAnchor here: the verifier reads it in the same snapshot as the chain,
  // so an audit-retentie run committing meanwhile cannot make them disagree.
  const tasks: TenantTask[] = tenants.map((t) => ({ tenantId: t.id, headAnchors: headAnchors.get(t.id)!.anchors }));
  const workers = o.workers ?? workerCount((sqlite.query("SELECT count(*) AS n FROM audit_entries").get() as { n: number }).n);
  // Each chain is streamed (verify.ts): memory does not grow with its length.
  const checked = await verifyTenants(sqlite, deps.store.path, tasks, workers);

  const tijdstip = now.toISOString();
  const saveState = sqlite.query(
    `INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden)
     VALUES (?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (tenant_id) DO UPDATE SET gecontroleerd = excluded.gecontroleerd, intact = excluded.intact,
       aantal_entries = excluded.aantal_entries, fout_seq = excluded.fout_seq,
       fout_entry_id = excluded.fout_entry_id, fout_reden = excluded.fout_reden`,
  );
  const resultaten: VerificatieResultaat[] = [];
  sqlite.transaction(() => {
    for (const t of tenants) {
      const r = withAnchorSignatures(sqlite, t.id, checked.get(t.id)!, headAnchors.get(t.id)!);
      saveState.run(t.id, tijdstip, r.intact ? 1 : 0, r.aantalEntries, r.fout?.seq ?? null, r.fout?.entryId ?? null, r.fout?.reden ?? null);
      resultaten.push({ tenantId: t.id, tenant: t.naam, intact: r.intact, aantalEntries: r.aantalEntries, ...(r.fout ? { fout: r.fout } : {}) });
    }
  }).immediate();

  const gebroken = resultaten.filter((r) => !r.intact);
  if (gebroken.length > 0) {
    const namen = gebroken.slice(0, 10).map((r) => `${r.tenant} (${r.tenantId})`).join(", ");
    await deps.alarms.raise({
      type: "audit-chain-broken",
      message:
        `Audit-hashketen verbroken bij ${gebroken.length} tenant(s): ${namen}` +
        (gebroken.length > 10 ? ` en ${gebroken.length - 10} andere` : "") +
        ". Mogelijk is er met de audit-log geknoeid.",
      context: {
        aantalGebroken: gebroken.length,
        gebroken: gebroken.slice(0, MAX_IN_ALARM).map((r) => ({ tenantId: r.tenantId, tenant: r.tenant, fout: r.fout })),
      },
    });
  }
  return {
    status: gebroken.length > 0 ? 409 : 200,
    body: { gecontroleerd: tenants.length, aantalGebroken: gebroken.length, resultaten, tijdstip },
  };
}

const RESULT_SCHEMA = {
  type: "object",
  required: ["gecontroleerd", "aantalGebroken", "resultaten", "tijdstip"],
  properties: {
    gecontroleerd: { type: "integer", description: "Aantal gecontroleerde tenants (alle tenants)." },
    aantalGebroken: { type: "integer", description: "Aantal tenants met een verbroken keten." },
    tijdstip: { type: "string", format: "date-time" },
    resultaten: {
      type: "array",
      items: {
        type: "object",
        required: ["tenantId", "tenant", "intact", "aantalEntries"],
        properties: {
          tenantId: { type: "integer" },
          tenant: { type: "string", description: "Naam van de tenant." },
          intact: { type: "boolean" },
          aantalEntries: { type: "integer", description: "Aantal (resterende) entries in de keten." },
          fout: {
            type: "object",
            description: "De eerste plek waar de keten niet klopt.",
            required: ["seq", "entryId", "reden"],
            properties: {
              seq: { type: "integer" },
              entryId: { type: ["integer", "null"], description: "null bij kop-ontbreekt (de entry bestaat niet meer)." },
              reden: { type: "string", enum: ["hash-afwijkend", "koppeling-verbroken", "volgnummer-gat", "anker-afwijkend", "kop-ontbreekt"] },
            },
          },
        },
      },
    },
  },
};

export const auditVerificatieJob = defineJob({
  name: "audit-verificatie",
  summary: "Controleert de SHA-256-hashketen van elke tenant",
  description:
    "Per tenant, in volgorde: elke hash wordt herberekend, elke prevHash moet gelijk zijn aan de hash ervoor, " +
    "volgnummers zonder gat, de oudste entry sluit aan op de genesiswaarde of het retentie-anker, en elk vastgelegd " +
    "kop-anker staat nog ongewijzigd in de keten. 409 met hetzelfde object en een alarm (`audit-chain-broken`) " +
    "zodra één keten verbroken is. Het resultaat per tenant wordt bewaard voor de rapporten.",
  run: (deps, now) => runAuditVerificatie(deps, now),
  openapi: {
    responses: {
      200: { description: "Alle ketens intact.", schema: RESULT_SCHEMA },
      409: { description: "Minstens één keten verbroken (of de taak loopt al: dan `{error}`).", schema: RESULT_SCHEMA },
    },
  },
});
