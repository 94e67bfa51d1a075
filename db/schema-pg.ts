// The Drizzle schema for PostgreSQL (DATABASE_URL=postgres://…): the same tables,
// columns and indexes as db/schema.ts, which docs/data-model.md explains; a test
// (test/pg-chain.test.ts) fails when the two differ in a table, column or index name.
//
// What differs, and why:
// - Times stay ISO 8601 UTC text, as in SQLite: `created_at` is hashed exactly as
//   stored, and `grens` comparisons are string comparisons. They are declared
//   COLLATE "C" so text order is byte order whatever the database's collation.
// - `details` stays text, never jsonb: jsonb reorders keys and drops whitespace, and
//   the chain hashes the canonical text as written.
// - Audit and login ids and sequence numbers are bigint (SQLite's integers are 64-bit);
//   `audit_entries.id` comes from an identity sequence instead of max(id) + 1, because
//   PostgreSQL appenders to different tenants run at the same time (src/pg/chain.ts).
// - Booleans are boolean.
// - audit_entries has no foreign key to tenants. PostgreSQL checks
//   one per inserted row (a query and a KEY SHARE lock on the tenant's row, in a
//   trigger), and a write API batch holds its tenants' chain locks while it inserts:
//   the checks were a fifth of that time, and batches over many tenants queue behind
//   each other on those locks (bench/pg-ingest-profile.ts, docs/performance.md). What
//   the keys refused is refused once per statement instead (migration 0002: statement
//   triggers on the audit tables, a trigger on tenants; docs/postgresql.md), and an
//   append holds its tenants' rows FOR KEY SHARE from its check that they exist until it
//   commits (src/pg/ingest.ts). SQLite checks its keys without locks and keeps them.
import { sql } from "drizzle-orm";
import { bigint, boolean, customType, index, integer, pgTable, primaryKey, serial, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";

/** An ISO 8601 UTC time as text, compared byte by byte. */
const time = customType<{ data: string; driverData: string }>({
  dataType: () => 'text COLLATE "C"',
});
/** A 64-bit integer read as a JavaScript number (exact up to 2^53). */
const int64 = (name: string) => bigint(name, { mode: "number" });

export const tenants = pgTable("tenants", {
  id: serial("id").primaryKey(),
  naam: text("naam").notNull(),
  actief: boolean("actief").notNull().default(true),
  aangemaakt: time("aangemaakt").notNull(),
});

export const administrators = pgTable(
  "administrators",
  {
    id: serial("id").primaryKey(),
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    naam: text("naam").notNull(),
    email: text("email").notNull(),
    actief: boolean("actief").notNull().default(true),
  },
  (t) => [index("administrators_tenant_idx").on(t.tenantId)],
);

export const auditEntries = pgTable(
  "audit_entries",
  {
    // No foreign key: see the top of this file.
    tenantId: integer("tenant_id").notNull(),
    seq: int64("seq").notNull(),
    id: int64("id").notNull().generatedByDefaultAsIdentity(),
    createdAt: time("created_at").notNull(),
    actor: text("actor").notNull(),
    action: text("action").notNull(),
    subject: text("subject").notNull(),
    details: text("details").notNull(),
    prevHash: text("prev_hash").notNull(),
    hash: text("hash").notNull(),
    // The write API's idempotency key and the hash of the content sent under it, as in db/schema.ts.
    sleutel: text("sleutel"),
    inhoud: text("inhoud"),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.seq] }),
    uniqueIndex("audit_entries_id_idx").on(t.id),
    index("audit_entries_tenant_created_idx").on(t.tenantId, t.createdAt),
    uniqueIndex("audit_entries_sleutel_idx").on(t.tenantId, t.sleutel).where(sql`${t.sleutel} IS NOT NULL`),
  ],
);

export const auditRetentionAnchors = pgTable("audit_retention_anchors", {
  tenantId: integer("tenant_id")
    .primaryKey()
    .references(() => tenants.id),
  seq: int64("seq").notNull(),
  hash: text("hash").notNull(),
  bijgewerkt: time("bijgewerkt").notNull(),
});

export const auditHeadAnchors = pgTable(
  "audit_head_anchors",
  {
    id: serial("id").primaryKey(),
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    seq: int64("seq").notNull(),
    hash: text("hash").notNull(),
    tijdstip: time("tijdstip").notNull(),
    handtekening: text("handtekening"),
  },
  (t) => [index("audit_head_anchors_tenant_seq_idx").on(t.tenantId, t.seq)],
);

export const auditAnchorLog = pgTable(
  "audit_anchor_log",
  {
    positie: int64("positie").primaryKey(),
    soort: text("soort").notNull(),
    tenantId: integer("tenant_id"),
    grootte: int64("grootte").notNull(),
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

export const loginAttempts = pgTable(
  "login_attempts",
  {
    id: int64("id").primaryKey().generatedByDefaultAsIdentity(),
    tijdstip: time("tijdstip").notNull(),
    account: text("account").notNull(),
    ip: text("ip").notNull(),
    gelukt: boolean("gelukt").notNull(),
    reden: text("reden"),
    tenantId: integer("tenant_id").references(() => tenants.id),
  },
  (t) => [
    index("login_attempts_tijdstip_idx").on(t.tijdstip),
    index("login_attempts_failed_idx")
      .on(t.tijdstip, t.ip, t.account)
      .where(sql`gelukt = false`),
  ],
);

export const backupStatuses = pgTable(
  "backup_statuses",
  {
    id: serial("id").primaryKey(),
    ontvangen: time("ontvangen").notNull(),
    exitCode: integer("exit_code").notNull(),
    gelukt: boolean("gelukt").notNull(),
    bestandsnaam: text("bestandsnaam"),
    grootte: int64("grootte"),
    foutmelding: text("foutmelding"),
    bron: text("bron").notNull(),
    // The report as stored, signed with the anchor key (src/row-seal.ts): only a sealed report counts.
    zegel: text("zegel"),
  },
  (t) => [index("backup_statuses_ontvangen_idx").on(t.ontvangen)],
);

export const jobRuns = pgTable(
  "job_runs",
  {
    id: serial("id").primaryKey(),
    job: text("job").notNull(),
    gestart: time("gestart").notNull(),
    beeindigd: time("beeindigd"),
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

export const weeklyReportDeliveries = pgTable(
  "weekly_report_deliveries",
  {
    administratorId: integer("administrator_id")
      .notNull()
      .references(() => administrators.id),
    tenantId: integer("tenant_id")
      .notNull()
      .references(() => tenants.id),
    isoWeek: text("iso_week").notNull(),
    verstuurd: time("verstuurd").notNull(),
  },
  (t) => [primaryKey({ columns: [t.administratorId, t.tenantId, t.isoWeek] })],
);

export const serviceMeta = pgTable("service_meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
  // 'geinstalleerd' signed with the anchor key (src/row-seal.ts): only a sealed install time counts.
  zegel: text("zegel"),
});

export const auditVerificationState = pgTable("audit_verification_state", {
  tenantId: integer("tenant_id")
    .primaryKey()
    .references(() => tenants.id),
  gecontroleerd: time("gecontroleerd").notNull(),
  intact: boolean("intact").notNull(),
  aantalEntries: int64("aantal_entries").notNull(),
  foutSeq: int64("fout_seq"),
  foutEntryId: int64("fout_entry_id"),
  foutReden: text("fout_reden"),
  // The row signed with the anchor key when audit-verificatie writes it (src/row-seal.ts): only a sealed result counts.
  zegel: text("zegel"),
});

export const jobLeases = pgTable("job_leases", {
  job: text("job").primaryKey(),
  pid: integer("pid").notNull(),
  instantie: text("instantie").notNull(),
  host: text("host").notNull(),
  pidNs: text("pid_ns"),
  runId: integer("run_id").notNull(),
  verkregen: time("verkregen").notNull(),
  vernieuwd: time("vernieuwd").notNull(),
  verloopt: time("verloopt").notNull(),
  // The lease signed with the anchor key (src/row-seal.ts): an unsealed lease holds nothing.
  zegel: text("zegel"),
});

// The e-mail channel's memory of the alarm conditions it mailed (db/schema.ts explains).
export const alarmMails = pgTable("alarm_mails", {
  about: text("about").primaryKey(),
  state: text("state").notNull(),
  gemaild: time("gemaild").notNull(),
});

// PostgreSQL only (no counterpart in db/schema.ts): a row per write transaction whose
// outcome must be certain (src/pg/commit.ts). When the answer to its COMMIT is lost, the
// server's word that the transaction id committed counts only if this row, written by
// that transaction, is there too: after a crash recovery that lost the transaction, the
// same id can be given to another that commits. A row older than ten minutes serves
// nothing (a lookup lasts 5 s); each transaction deletes up to two of those.
export const commitMarkers = pgTable(
  "commit_markers",
  {
    token: text("token").primaryKey(),
    at: timestamp("at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index("commit_markers_at_idx").on(t.at)],
);
