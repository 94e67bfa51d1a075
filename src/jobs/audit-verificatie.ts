// audit-verificatie: compares the anchor file with its copy in the database and
// verifies every tenant's hash chain against its newest signed checkpoint, streaming
// (src/audit/verify-all.ts; src/pg/offline.ts on PostgreSQL), and keeps each tenant's
// latest result for the reports. A broken chain or anchor file is 409 and one alarm per
// run naming what is broken: verificationOutcome, the same rule on either store.
import { getTableName, is, max, sql } from "drizzle-orm";
import { PgTable } from "drizzle-orm/pg-core";
import * as pgSchema from "../../db/schema-pg.ts";
import { schemaAnomaliesPg, schemaAnomaliesSqlite } from "../audit/schema-guard.ts";
import { t, type Static } from "elysia";
import { auditEntries, auditVerificationState, tenants } from "../../db/schema.ts";
import type { Alarm } from "../alarms/alarm.ts";
import type { FileReason, RowReason } from "../audit/anchor-check.ts";
import { auditKeys } from "../audit/keys.ts";
import { verifyInstallation, type InstallationVerdict } from "../audit/verify-all.ts";
import { workerCount } from "../audit/verify-parallel.ts";
import type { BreakReason } from "../audit/verify.ts";
import { excluded, preparedPerConnection, type Db } from "../db.ts";
import type { AnyStore, Deps } from "../deps.ts";
import { verifyInstallationPg } from "../pg/offline.ts";
import { maxAuditEntryIdPg, saveVerificationStatePg, tenantNamesPg } from "../pg/verification-state.ts";
import { defineJob, type JobResult } from "./job.ts";
import { dateTime, integer, nullable, enumOf } from "./schema.ts";
import { mapInTurns, rowSealOf, stateNotAfter, verificationWitnessFile, witnessMoment, type VerificationColumns } from "../row-seal.ts";
import { alarmWitnessNotWritten } from "./witness-alarm.ts";

// Every reason code the verifier reports; the type assertions below make a new code
// that is missing here a compile error.
const BREAK_REASONS = [
  "hash-afwijkend",
  "koppeling-verbroken",
  "volgnummer-gat",
  "anker-afwijkend",
  "kop-ontbreekt",
  "checkpoint-afwijkend",
  "retentie-ontbreekt",
  "retentie-ongeldig",
  "checkpoint-ontbreekt",
  "checkpoint-niet-in-bestand",
] as const satisfies readonly (BreakReason | RowReason)[];
const FILE_REASONS = ["bestand-ontbreekt", "bestand-ingekort", "bestand-gewijzigd", "database-teruggezet"] as const satisfies readonly FileReason[];
true satisfies BreakReason | RowReason extends (typeof BREAK_REASONS)[number] ? true : never;
true satisfies FileReason extends (typeof FILE_REASONS)[number] ? true : never;

/** Why a tenant's chain does not check out (audit-anker refuses a tenant for the same reasons). */
export const KetenReden = enumOf(BREAK_REASONS);

export const VerificatieResultaat = t.Object({
  tenantId: integer(),
  tenant: t.String({ description: "Naam van de tenant." }),
  intact: t.Boolean(),
  aantalEntries: integer({ minimum: 0, description: "Aantal (resterende) entries in de keten." }),
  fout: t.Optional(
    t.Object(
      {
        seq: integer(),
        entryId: nullable(integer(), { description: "null bij kop-ontbreekt (de entry bestaat niet meer)." }),
        reden: KetenReden,
      },
      { description: "Alleen bij een verbroken keten: de eerste plek waar de keten niet klopt." },
    ),
  ),
});
export type VerificatieResultaat = Static<typeof VerificatieResultaat>;

export const AnkerbestandResultaat = t.Object(
  {
    intact: t.Boolean(),
    bestand: t.String(),
    regels: integer({ minimum: 0 }),
    reden: t.Optional(enumOf(FILE_REASONS)),
    toelichting: t.Optional(t.String()),
    waarschuwingen: t.Array(t.String()),
  },
  { description: "Het ankerbestand tegen de kopie in de database." },
);
export type AnkerbestandResultaat = Static<typeof AnkerbestandResultaat>;

export const SchemaResultaat = t.Object(
  {
    intact: t.Boolean(),
    afwijkingen: t.Array(t.String(), {
      description:
        "Wat in het schema van de database afwijkt van wat nachtwacht aanmaakte: triggers, views, regels, rijbeveiliging, een tabel met dezelfde naam in een ander schema, " +
        "functies `nachtwacht_*`; op PostgreSQL ook een eigen trigger of functie van nachtwacht die gewijzigd, uitgeschakeld of verdwenen is.",
    }),
  },
  { description: "Het schema van de database: wie het kan wijzigen, kan iets tussen nachtwacht en zijn tabellen zetten (src/audit/schema-guard.ts)." },
);

export const VerificatieBody = t.Object({
  gecontroleerd: integer({ minimum: 0, description: "Aantal gecontroleerde tenants (alle tenants)." }),
  aantalGebroken: integer({ minimum: 0, description: "Aantal tenants met een verbroken keten." }),
  resultaten: t.Array(VerificatieResultaat),
  ankerbestand: AnkerbestandResultaat,
  schema: SchemaResultaat,
  tijdstip: dateTime(),
});
export type VerificatieBody = Static<typeof VerificatieBody>;

/** nachtwacht's tables on PostgreSQL, by name: a same-named one in another schema is reported. */
const PG_TABLES = Object.values(pgSchema as Record<string, unknown>)
  .filter((x): x is PgTable => is(x, PgTable))
  .map((x) => getTableName(x));

/** At most this many broken tenants are listed in the alarm's context. */
const MAX_IN_ALARM = 50;

export interface VerificatieOptions {
  /** Worker threads; by default none below 200k entries, else up to 4 (one per core). */
  workers?: number;
}

/**
 * Worker threads for checking every chain (workerCount), by the number of audit entries:
 * audit-verificatie and audit-retentie, which verifies before it deletes.
 */
export async function verificationWorkers(store: AnyStore): Promise<number> {
  // max(id), not count(*): ids only grow (SQLite's max + 1, PostgreSQL's identity
  // sequence), so it bounds the number of entries from above, which is all this choice
  // needs, and it reads one index page instead of counting millions of rows on the
  // event loop (36–73 ms at 5M entries; bench/ingest.ts).
  if (store.kind === "pg") return workerCount(await maxAuditEntryIdPg(store.db));
  const { entries } = store.db.select({ entries: max(auditEntries.id) }).from(auditEntries).get()!;
  return workerCount(entries ?? 0);
}

/** A tenant's row of audit_verification_state, as a run writes it on either store (before its seal). */
export type VerificationState = VerificationColumns;

/** Keeps a tenant's latest result; run for every tenant, so prepared once per connection. */
const saveStateStatement = preparedPerConnection((db) => {
  const s = auditVerificationState;
  return db
    .insert(s)
    .values({
      tenantId: sql.placeholder("tenantId"),
      gecontroleerd: sql.placeholder("gecontroleerd"),
      intact: sql.placeholder("intact"),
      aantalEntries: sql.placeholder("aantalEntries"),
      foutSeq: sql.placeholder("foutSeq"),
      foutEntryId: sql.placeholder("foutEntryId"),
      foutReden: sql.placeholder("foutReden"),
      zegel: sql.placeholder("zegel"),
    })
    .onConflictDoUpdate({
      target: s.tenantId,
      // every column but the key, from the row this run wrote
      set: {
        gecontroleerd: excluded(s.gecontroleerd),
        intact: excluded(s.intact),
        aantalEntries: excluded(s.aantalEntries),
        foutSeq: excluded(s.foutSeq),
        foutEntryId: excluded(s.foutEntryId),
        foutReden: excluded(s.foutReden),
        zegel: excluded(s.zegel),
      },
      // A run that started earlier and finished later (a lease taken over from a hung
      // process) must not put back an older view: the newest check stays. A row dated
      // after stateNotAfter is no check but a database writer's: it is overwritten.
      setWhere: sql`${excluded(s.gecontroleerd)} >= ${s.gecontroleerd} OR ${s.gecontroleerd} > ${sql.placeholder("notAfter")}`,
    })
    .prepare();
});

/** A tenant's row as a run stores it: sealed with the anchor key (src/row-seal.ts). */
export type SealedVerificationState = VerificationState & { zegel: string };

/** The run's rows in one write transaction (saveVerificationStatePg on PostgreSQL). */
function saveState(db: Db, rows: readonly SealedVerificationState[], writtenAt: Date): void {
  const save = saveStateStatement(db);
  const notAfter = stateNotAfter(writtenAt);
  db.transaction(
    () => {
      for (const r of rows) save.run({ ...r, notAfter });
    },
    { behavior: "immediate" },
  );
}

/** What one run answers, keeps and raises, from the installation's verdict: the same on either store. */
export interface VerificatieUitkomst {
  result: JobResult<VerificatieBody>;
  /** Each tenant's row of audit_verification_state. */
  state: VerificationState[];
  /** The run's one alarm, when a chain or the anchor file is broken. */
  alarm: Alarm | null;
}

export function verificationOutcome(
  v: InstallationVerdict,
  tenantRows: readonly { id: number; naam: string }[],
  bestand: string,
  now: Date,
  /** What the database's schema holds that nachtwacht did not make (src/audit/schema-guard.ts). */
  afwijkingen: readonly string[] = [],
): VerificatieUitkomst {
  const tijdstip = now.toISOString();
  const names = new Map(tenantRows.map((t) => [t.id, t.naam]));
  const resultaten: VerificatieResultaat[] = v.tenants.map((r) => ({ ...r, tenant: names.get(r.tenantId) ?? "(niet meer in de tabel tenants)" }));
  // State is kept per row of tenants (the reports read it by tenant).
  const state: VerificationState[] = resultaten
    .filter((r) => names.has(r.tenantId))
    .map((r) => ({
      tenantId: r.tenantId,
      gecontroleerd: tijdstip,
      intact: r.intact,
      aantalEntries: r.aantalEntries,
      foutSeq: r.fout?.seq ?? null,
      foutEntryId: r.fout?.entryId ?? null,
      foutReden: r.fout?.reden ?? null,
    }));

  const probleem = v.probleem;
  const ankerbestand: AnkerbestandResultaat = {
    intact: !probleem,
    bestand,
    regels: v.regels,
    ...(probleem ? { reden: probleem.reden, toelichting: probleem.toelichting } : {}),
    waarschuwingen: v.waarschuwingen,
  };

  const gebroken = resultaten.filter((r) => !r.intact);
  const schema = { intact: afwijkingen.length === 0, afwijkingen: [...afwijkingen] };
  let alarm: Alarm | null = null;
  if (gebroken.length > 0 || probleem || !schema.intact) {
    const namen = gebroken.slice(0, 10).map((r) => `${r.tenant} (${r.tenantId}): ${r.fout!.reden}`).join(", ");
    alarm = {
      type: "audit-chain-broken",
      message:
        (probleem ? `Ankerbestand: ${probleem.reden} — ${probleem.toelichting}. ` : "") +
        (schema.intact
          ? ""
          : `Het schema van de database wijkt af van wat nachtwacht aanmaakte (${afwijkingen.slice(0, 5).join("; ")}${afwijkingen.length > 5 ? "; …" : ""}): ` +
            "iemand die het schema kan wijzigen, kan daarmee entries na het opslaan veranderen of nachtwacht iets anders laten lezen. ") +
        (gebroken.length > 0
          ? `Audit-hashketen verbroken bij ${gebroken.length} tenant(s): ${namen}` + (gebroken.length > 10 ? ` en ${gebroken.length - 10} andere` : "") + ". "
          : "") +
        "Mogelijk is er met de audit-log geknoeid.",
      context: {
        aantalGebroken: gebroken.length,
        ankerbestand,
        schema,
        gebroken: gebroken.slice(0, MAX_IN_ALARM).map((r) => ({ tenantId: r.tenantId, tenant: r.tenant, fout: r.fout })),
      },
    };
  }
  return {
    result: {
      status: alarm ? 409 : 200,
      body: { gecontroleerd: resultaten.length, aantalGebroken: gebroken.length, resultaten, ankerbestand, schema, tijdstip },
    },
    state,
    alarm,
  };
}

export async function runAuditVerificatie(deps: Deps, now: Date, o: VerificatieOptions = {}): Promise<JobResult<VerificatieBody>> {
  const { store } = deps;
  const keys = auditKeys(deps.config);
  const bestand = deps.config.auditAnkerBestand;
  const tenantRows = store.kind === "pg" ? await tenantNamesPg(store.db) : store.db.select({ id: tenants.id, naam: tenants.naam }).from(tenants).orderBy(tenants.id).all();
  const tenantIds = tenantRows.map((t) => t.id);
  const workers = o.workers ?? (await verificationWorkers(store));
  const v =
    store.kind === "pg"
      ? await verifyInstallationPg(store.url, bestand, keys.verifiers, { workers, tenantIds })
      : await verifyInstallation(store.sqlite, store.path, bestand, tenantIds, keys.verifiers, { workers });

  const afwijkingen = store.kind === "pg" ? await schemaAnomaliesPg(store.sql, PG_TABLES) : schemaAnomaliesSqlite(store.sqlite);
  const { result, state, alarm } = verificationOutcome(v, tenantRows, bestand, now, afwijkingen);
  const seal = rowSealOf(deps.config);
  const sealed = await mapInTurns(state, (r) => ({ ...r, zegel: seal.sealVerification(r) }));
  // "Dated ahead" is judged at the time of writing, not of the run's start: a run that
  // started earlier and ends later (a lease taken over from a hung process) keeps the newer check.
  const writtenAt = deps.clock();
  if (store.kind === "pg") await saveVerificationStatePg(store.db, sealed, writtenAt);
  else saveState(store.db, sealed, writtenAt);
  // Out of a database writer's reach: this run's start, its results' `gecontroleerd`, so
  // that the reports count no older result put back (verificationSince). The results are
  // stored either way; a file that cannot be written is an alarm, and the reports then go
  // by the sealed job_runs rows alone.
  try {
    witnessMoment(verificationWitnessFile(deps.config), now.toISOString());
  } catch (e) {
    await alarmWitnessNotWritten(
      deps,
      verificationWitnessFile(deps.config),
      e,
      "de rapporten merken niet op wanneer de resultaten van deze controle door oudere worden vervangen, tot een volgende audit-verificatie het bestand schrijft.",
      "could not record the verification run beside the anchor file; the reports cannot notice its results replaced by older ones",
    );
  }
  if (alarm) await deps.alarms.raise(alarm);
  return result;
}

export const auditVerificatieJob = defineJob({
  name: "audit-verificatie",
  summary: "Controleert de SHA-256-hashketen van elke tenant",
  description:
    "Vergelijkt eerst het ankerbestand (de autoriteit) regel voor regel met de kopie in de database, en controleert dan per " +
    "tenant, in volgorde: elke hash wordt herberekend, elke prevHash moet gelijk zijn aan de hash ervoor, volgnummers zonder gat, " +
    "de oudste entry sluit aan op de genesiswaarde of op een ondertekend, gerechtvaardigd retentierecord, en de RFC 6962-root " +
    "over de entry-hashes is gelijk aan die van het nieuwste ondertekende checkpoint in het bestand, dat de keten nog haalt. " +
    "Daarnaast het schema van de database: triggers, views, regels, rijbeveiliging of functies die nachtwacht niet aanmaakte, en op PostgreSQL " +
    "nachtwachts eigen triggers en functies zoals de migraties ze aanmaakten (`schema`). " +
    "409 met hetzelfde object en een alarm (`audit-chain-broken`) zodra één keten, het ankerbestand of het schema niet klopt. " +
    "Het resultaat per tenant wordt bewaard voor de rapporten.",
  run: (deps, now) => runAuditVerificatie(deps, now),
  responses: {
    200: { description: "Alle ketens intact.", schema: VerificatieBody },
    409: { description: "Minstens één keten of het ankerbestand klopt niet; alarm verstuurd.", schema: VerificatieBody },
  },
});
