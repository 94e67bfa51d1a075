// The Drizzle schema: every table nachtwacht reads or writes. docs/data-model.md
// explains each column and how the host application writes into these tables.
//
// Times are ISO 8601 UTC text with milliseconds (`Date#toISOString()`), so text order
// is time order and `grens` comparisons are plain string comparisons on an index.
import { sql } from "drizzle-orm";
import {
  index,
  integer,
  primaryKey,
  sqliteTable,
  text,
  uniqueIndex,
} from "drizzle-orm/sqlite-core";

export const tenants = sqliteTable("tenants", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  naam: text("naam").notNull(),
  actief: integer("actief", { mode: "boolean" }).notNull().default(true),
  aangemaakt: text("aangemaakt").notNull(),
});

export const administrators = sqliteTable(
  "administrators",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    naam: text("naam").notNull(),
    email: text("email").notNull(),
    actief: integer("actief", { mode: "boolean" }).notNull().default(true),
  },
  (t) => [index("administrators_tenant_idx").on(t.tenantId)],
);

// The audit log: one SHA-256 hash chain per tenant (src/audit/chain.ts,
// docs/audit-chain.md). The table is WITHOUT ROWID (see the migration) so a tenant's
// chain is stored contiguously in (tenant_id, seq) order: verification then reads it
// sequentially instead of jumping through the file.
export const auditEntries = sqliteTable(
  "audit_entries",
  {
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    seq: integer("seq").notNull(),
    id: integer("id").notNull(),
    createdAt: text("created_at").notNull(),
    actor: text("actor").notNull(),
    action: text("action").notNull(),
    subject: text("subject").notNull(),
    details: text("details").notNull(),
    prevHash: text("prev_hash").notNull(),
    hash: text("hash").notNull(),
    // The write API's idempotency key (POST /api/audit), when the entry was sent with
    // one, and `inhoud`: the SHA-256 of the entry as sent (src/ingest/audit.ts). A
    // retry with the same content gets this entry's receipt (seq, id, hash); other
    // content under the same sleutel is refused. Not part of the hash: they say how the
    // entry arrived, not what it records. Kept in the entry's row, not a table of their
    // own, so they are written with it (one index more per append instead of a table
    // and two indexes: the write API's throughput, docs/performance.md) and deleted
    // with it by audit-retentie.
    sleutel: text("sleutel"),
    inhoud: text("inhoud"),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.seq] }),
    uniqueIndex("audit_entries_id_idx").on(t.id),
    index("audit_entries_tenant_created_idx").on(t.tenantId, t.createdAt),
    // Partial: an entry without a sleutel costs this index nothing.
    uniqueIndex("audit_entries_sleutel_idx").on(t.tenantId, t.sleutel).where(sql`${t.sleutel} IS NOT NULL`),
  ],
);

// Per tenant: the sequence number and hash of the last entry audit-retentie deleted.
// The oldest remaining entry must link to it (or to the genesis value when none).
export const auditRetentionAnchors = sqliteTable("audit_retention_anchors", {
  tenantId: integer("tenant_id")
    .primaryKey()
    .references(() => tenants.id),
  seq: integer("seq").notNull(),
  hash: text("hash").notNull(),
  bijgewerkt: text("bijgewerkt").notNull(),
});

// Chain heads recorded by audit-anker before signed checkpoints (HMAC-signed or unsigned).
// No longer written nor trusted; kept so that nothing is lost on upgrade (docs/audit-chain.md).
export const auditHeadAnchors = sqliteTable(
  "audit_head_anchors",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    seq: integer("seq").notNull(),
    hash: text("hash").notNull(),
    tijdstip: text("tijdstip").notNull(),
    handtekening: text("handtekening"),
  },
  (t) => [index("audit_head_anchors_tenant_seq_idx").on(t.tenantId, t.seq)],
);

// The database copy of AUDIT_ANKER_BESTAND (src/audit/anchor-file.ts): one row per line
// of that file, keyed by the line's byte offset. The file is the authority; verification
// compares every row with the line at its offset. `bereik` (checkpoints and installation
// checkpoints only) is the tree's compact range at that size, so the next audit-anker
// run extends it instead of rehashing the chain; it is checked against the signed root
// before use.
export const auditAnchorLog = sqliteTable(
  "audit_anchor_log",
  {
    positie: integer("positie").primaryKey(),
    // 'checkpoint' | 'retentie' | 'installatie' | 'adoptie' | 'herstel' (src/audit/records.ts)
    soort: text("soort").notNull(),
    tenantId: integer("tenant_id"),
    // checkpoint: tree size; retentie: seq of the last deleted entry; installatie: tree size;
    // adoptie: the seq the chain is adopted from; herstel: the accepted size
    grootte: integer("grootte").notNull(),
    note: text("note").notNull(),
    bereik: text("bereik"),
  },
  (t) => [
    index("audit_anchor_log_tenant_idx").on(t.tenantId, t.soort, t.grootte),
    // The few records the operator signed by hand, which the daily report names every day:
    // found without reading the whole log, which grows by a line per tenant per night.
    index("audit_anchor_log_operator_idx")
      .on(t.positie)
      .where(sql`soort IN ('adoptie', 'herstel')`),
  ],
);

// BeveiligingsLog: login attempts written by the host application.
export const loginAttempts = sqliteTable(
  "login_attempts",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    tijdstip: text("tijdstip").notNull(),
    account: text("account").notNull(),
    ip: text("ip").notNull(),
    gelukt: integer("gelukt", { mode: "boolean" }).notNull(),
    reden: text("reden"),
    tenantId: integer("tenant_id").references(() => tenants.id),
  },
  (t) => [
    index("login_attempts_tijdstip_idx").on(t.tijdstip),
    // beveiligingslog-analyse reads only failed attempts of the last hour.
    index("login_attempts_failed_idx")
      .on(t.tijdstip, t.ip, t.account)
      .where(sql`gelukt = 0`),
  ],
);

export const backupStatuses = sqliteTable(
  "backup_statuses",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    ontvangen: text("ontvangen").notNull(),
    exitCode: integer("exit_code").notNull(),
    gelukt: integer("gelukt", { mode: "boolean" }).notNull(),
    bestandsnaam: text("bestandsnaam"),
    grootte: integer("grootte"),
    foutmelding: text("foutmelding"),
    bron: text("bron").notNull(),
    // The report as stored, signed with the anchor key (src/row-seal.ts): only a sealed report counts.
    zegel: text("zegel"),
  },
  (t) => [index("backup_statuses_ontvangen_idx").on(t.ontvangen)],
);

// The job-run history: one row per run, written when it starts and updated when it
// ends. A row with `beeindigd` null and uitkomst 'bezig' after the process died is
// an interrupted run.
export const jobRuns = sqliteTable(
  "job_runs",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    job: text("job").notNull(),
    gestart: text("gestart").notNull(),
    beeindigd: text("beeindigd"),
    // 'afwijking': a check answered 409
    uitkomst: text("uitkomst").$type<"bezig" | "ok" | "afwijking" | "fout">().notNull(),
    httpStatus: integer("http_status"),
    samenvatting: text("samenvatting"),
    fout: text("fout"),
    // The run's start signed with the anchor key (src/row-seal.ts): only a sealed run
    // counts as one, for a scheduled call's "already done" and for taken-controle.
    zegel: text("zegel"),
    // The run's end, with its start, signed when it ends: a run that ended counts only with it.
    eindzegel: text("eindzegel"),
  },
  (t) => [index("job_runs_job_gestart_idx").on(t.job, t.gestart)],
);

// weekrapport: one row per (administrator, tenant, ISO week) once the transport
// accepted the message, so a rerun in the same week sends only what is still owed.
export const weeklyReportDeliveries = sqliteTable(
  "weekly_report_deliveries",
  {
    administratorId: integer("administrator_id")
      .notNull()
      .references(() => administrators.id),
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    isoWeek: text("iso_week").notNull(),
    verstuurd: text("verstuurd").notNull(),
  },
  (t) => [primaryKey({ columns: [t.administratorId, t.tenantId, t.isoWeek] })],
);

// Facts the service keeps about itself, e.g. when it was installed (taken-controle).
export const serviceMeta = sqliteTable("service_meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
  // 'geinstalleerd' signed with the anchor key (src/row-seal.ts): only a sealed install time counts.
  zegel: text("zegel"),
});

// The latest audit-verificatie result per tenant: weekrapport and dagrapport show it.
export const auditVerificationState = sqliteTable("audit_verification_state", {
  tenantId: integer("tenant_id")
    .primaryKey()
    .references(() => tenants.id),
  gecontroleerd: text("gecontroleerd").notNull(),
  intact: integer("intact", { mode: "boolean" }).notNull(),
  aantalEntries: integer("aantal_entries").notNull(),
  foutSeq: integer("fout_seq"),
  foutEntryId: integer("fout_entry_id"),
  foutReden: text("fout_reden"),
  // The row signed with the anchor key when audit-verificatie writes it (src/row-seal.ts): only a sealed result counts.
  zegel: text("zegel"),
});

// The "already running" guard across processes: one row per job while a run holds it
// (src/job-lease.ts). Taken in the IMMEDIATE transaction that writes the run's job_runs
// row, renewed while the run goes on, deleted when it ends. A row whose `verloopt` has
// passed belongs to a holder that died (or stopped renewing) and may be taken over.
// The holder is `pid` plus `instantie`, a random id per service instance, so no
// process takes another's row for its own; `host` and `pid_ns` (hostname, PID namespace)
// say where that pid means something: a holder on this host whose pid is gone died, and
// its row is taken over before it expires.
export const jobLeases = sqliteTable("job_leases", {
  job: text("job").primaryKey(),
  pid: integer("pid").notNull(),
  instantie: text("instantie").notNull(),
  host: text("host").notNull(),
  pidNs: text("pid_ns"),
  runId: integer("run_id").notNull(),
  verkregen: text("verkregen").notNull(),
  vernieuwd: text("vernieuwd").notNull(),
  verloopt: text("verloopt").notNull(),
  // The lease signed with the anchor key (src/row-seal.ts): an unsealed lease holds nothing.
  zegel: text("zegel"),
});

// The e-mail channel's memory of the alarm conditions it mailed (src/alarms/alarm-memory.ts):
// one row per condition (`about`) with the `state` mailed and when (`gemaild`), shared by
// every instance on this database, so that the hourly checks mail a condition once
// whichever instance runs them. Not sealed: a database writer could only cause a
// duplicate mail or keep one back until its daily reminder.
export const alarmMails = sqliteTable("alarm_mails", {
  about: text("about").primaryKey(),
  state: text("state").notNull(),
  gemaild: text("gemaild").notNull(),
});
