// Demo data: tenants (some inactive), administrators, valid audit chains spread over
// ten years, login attempts over half a year, and backup statuses. Deterministic for a
// given seed. The benchmarks build their data with it, so it is written for speed:
// one prepared statement per table, large transactions, rows in primary-key order.
//
//   bun run demo-data -- --db ./data/demo.db --tenants 1000 --admins 10000 \
//       --audit 5000000 --logins 5000000
import { Database } from "bun:sqlite";
import { existsSync } from "node:fs";
import { CHAIN_VERSION, GENESIS_HASH, sha256Hex } from "../audit/chain.ts";
import { openStore } from "../db.ts";
import type { RowSeal } from "../row-seal.ts";
import { OptionError, parseOptions } from "./options.ts";

export interface DemoSizes {
  tenants: number;
  admins: number;
  audit: number;
  logins: number;
  backups: number;
}

export const DEMO_DEFAULT: DemoSizes = { tenants: 12, admins: 30, audit: 5000, logins: 5000, backups: 30 };

const DAY = 24 * 3600 * 1000;
/** Audit entries span ten years, so the 7-year retention deletes about a third. */
const AUDIT_SPAN_DAYS = 3650;
/** Login attempts span 180 days, so the 90-day retention deletes about half. */
const LOGIN_SPAN_DAYS = 180;

/** mulberry32: a small seeded PRNG, so demo data (and crash points in tests) repeat. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ORGS = ["Zorggroep", "Gemeente", "Stichting", "Advocatenkantoor", "Woningcorporatie", "Huisartsenpraktijk", "Accountants", "School"];
const PLACES = ["Amsterdam", "Utrecht", "Zwolle", "Groningen", "Eindhoven", "Delft", "Leiden", "Arnhem", "Breda", "Tilburg"];
const FIRST = ["anna", "bram", "carla", "daan", "eva", "floor", "gijs", "hanna", "ivo", "jet", "kees", "lotte", "milan", "noor", "otto", "pien"];
const ACTIONS = [
  "dossier.bekeken",
  "dossier.gewijzigd",
  "document.gedownload",
  "gebruiker.aangemaakt",
  "gebruiker.rol-gewijzigd",
  "export.gestart",
  "instelling.gewijzigd",
  "sessie.ingelogd",
];
const REASONS = ["wachtwoord-onjuist", "account-onbekend", "account-geblokkeerd", "2fa-onjuist"];

/**
 * Raw SQL: a bulk loader of millions of rows; drizzle's prepared insert took 1.5-2x as
 * long per row. `seal`: the service's row seal, for backup reports that count (the demo
 * service); without it they are stored unsealed, as a database writer would store them.
 */
export function fillDemoData(sqlite: Database, sizes: DemoSizes, now: Date, seed = 42, seal: RowSeal | null = null): void {
  const rand = seededRandom(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const nowMs = now.getTime();
  const iso = (ms: number) => new Date(ms).toISOString();

  const tenantIds: number[] = [];
  const tenantAdmins = new Map<number, string[]>();
  sqlite.transaction(() => {
    const insTenant = sqlite.prepare("INSERT INTO tenants (naam, actief, aangemaakt) VALUES (?, ?, ?) RETURNING id");
    for (let i = 0; i < sizes.tenants; i++) {
      // every tenth tenant is inactive: no weekly report
      const row = insTenant.get(`${pick(ORGS)} ${pick(PLACES)} ${i + 1}`, i % 10 === 9 ? 0 : 1, iso(nowMs - AUDIT_SPAN_DAYS * DAY)) as { id: number };
      tenantIds.push(row.id);
      tenantAdmins.set(row.id, []);
    }
    const insAdmin = sqlite.prepare("INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (?, ?, ?, ?)");
    for (let i = 0; i < sizes.admins && tenantIds.length > 0; i++) {
      const tenantId = tenantIds[i % tenantIds.length]!;
      const first = pick(FIRST);
      const email = `${first}.${i + 1}@tenant${tenantId}.example`;
      insAdmin.run(tenantId, `${first[0]!.toUpperCase()}${first.slice(1)} ${i + 1}`, email, i % 20 === 19 ? 0 : 1);
      tenantAdmins.get(tenantId)!.push(email);
    }
  }).immediate();

  // Audit chains, one tenant after the other in (tenant_id, seq) order: the order of
  // the WITHOUT ROWID primary key, which makes the inserts appends.
  if (tenantIds.length > 0 && sizes.audit > 0) {
    const ins = sqlite.prepare(
      `INSERT INTO audit_entries (tenant_id, seq, id, created_at, actor, action, subject, details, prev_hash, hash)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    let id = ((sqlite.query("SELECT coalesce(max(id), 0) AS m FROM audit_entries").get() as { m: number }).m) + 1;
    const perTenant = Math.floor(sizes.audit / tenantIds.length);
    let extra = sizes.audit - perTenant * tenantIds.length;
    const span = AUDIT_SPAN_DAYS * DAY;
    const BATCH = 50_000;
    let inBatch = 0;
    sqlite.run("BEGIN IMMEDIATE");
    for (const tenantId of tenantIds) {
      const n = perTenant + (extra-- > 0 ? 1 : 0);
      const admins = tenantAdmins.get(tenantId)!;
      let prev = GENESIS_HASH;
      const step = n > 0 ? span / n : 0;
      for (let seq = 1; seq <= n; seq++) {
        const createdAt = iso(nowMs - span + Math.floor((seq - 1) * step + rand() * step));
        const actor = admins.length > 0 && rand() < 0.6 ? pick(admins) : `medewerker${Math.floor(rand() * 500)}@tenant${tenantId}.example`;
        const action = pick(ACTIONS);
        const subject = `dossier/${Math.floor(rand() * 100000)}`;
        const details = `{"ip":"10.${Math.floor(rand() * 255)}.${Math.floor(rand() * 255)}.${Math.floor(rand() * 255)}","omschrijving":"${action} via webportaal","sessie":"${Math.floor(rand() * 1e12).toString(36)}","userAgent":"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"}`;
        const text = JSON.stringify([CHAIN_VERSION, tenantId, seq, createdAt, actor, action, subject, details, prev]);
        const hash = sha256Hex(text);
        ins.run(tenantId, seq, id++, createdAt, actor, action, subject, details, prev, hash);
        prev = hash;
        if (++inBatch >= BATCH) {
          sqlite.run("COMMIT");
          sqlite.run("BEGIN IMMEDIATE");
          inBatch = 0;
        }
      }
    }
    sqlite.run("COMMIT");
  }

  // Login attempts in time order; a fifth fail, from a smaller pool of addresses.
  if (sizes.logins > 0) {
    const ins = sqlite.prepare("INSERT INTO login_attempts (tijdstip, account, ip, gelukt, reden, tenant_id) VALUES (?, ?, ?, ?, ?, ?)");
    const span = LOGIN_SPAN_DAYS * DAY;
    const step = span / sizes.logins;
    const BATCH = 100_000;
    sqlite.run("BEGIN IMMEDIATE");
    for (let i = 0; i < sizes.logins; i++) {
      const tijdstip = iso(nowMs - span + Math.floor(i * step));
      const gelukt = rand() >= 0.2;
      const tenantId = tenantIds.length > 0 && rand() < 0.95 ? pick(tenantIds) : null;
      const admins = tenantId === null ? [] : tenantAdmins.get(tenantId)!;
      const account = admins.length > 0 && rand() < 0.5 ? pick(admins) : `gebruiker${Math.floor(rand() * 20000)}@example.nl`;
      const ip = gelukt
        ? `192.0.${Math.floor(rand() * 255)}.${Math.floor(rand() * 255)}`
        : `203.0.113.${Math.floor(rand() * 255)}`;
      ins.run(tijdstip, account, ip, gelukt ? 1 : 0, gelukt ? null : pick(REASONS), tenantId);
      if ((i + 1) % BATCH === 0) {
        sqlite.run("COMMIT");
        sqlite.run("BEGIN IMMEDIATE");
      }
    }
    sqlite.run("COMMIT");
  }

  // One backup a night at 02:30 UTC; one of them failed.
  if (sizes.backups > 0) {
    const ins = sqlite.prepare(
      "INSERT INTO backup_statuses (ontvangen, exit_code, gelukt, bestandsnaam, grootte, foutmelding, bron, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    );
    const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), 2, 30);
    const last = today <= nowMs ? today : today - DAY;
    sqlite.transaction(() => {
      for (let d = sizes.backups - 1; d >= 0; d--) {
        const t = last - d * DAY;
        const failed = d === 7;
        const name = `nachtwacht-${iso(t).slice(0, 10)}.db.gz`;
        const row = {
          ontvangen: iso(t),
          exitCode: failed ? 1 : 0,
          gelukt: !failed,
          bestandsnaam: name,
          grootte: failed ? null : 180_000_000 + Math.floor(rand() * 5_000_000),
          foutmelding: failed ? "gzip: No space left on device" : null,
          bron: "host-cron",
        };
        ins.run(row.ontvangen, row.exitCode, row.gelukt ? 1 : 0, row.bestandsnaam, row.grootte, row.foutmelding, row.bron, seal?.sealBackup(row) ?? null);
      }
    }).immediate();
  }
}

function parsePositive(name: string, v: string | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  if (!/^\d+$/.test(v)) throw new OptionError(`--${name} moet een geheel getal van 0 of meer zijn, niet ${JSON.stringify(v)}`);
  return Number(v);
}

const USAGE = "gebruik: bun run demo-data -- [--db BESTAND] [--tenants N] [--admins N] [--audit N] [--logins N] [--backups N] [--seed N]\n" +
  "  Vult een lege of nieuwe database met demodata (standaard DATABASE_PATH, anders ./data/nachtwacht.db); een database\n" +
  "  met tenants of audit-entries wordt geweigerd (exit 2): demodata hoort nooit in een echte installatie.";

/** Why `path` may not take demo data (it holds tenants or audit entries), or null: missing, new or empty. */
export function notEmptyReason(path: string): string | null {
  if (!existsSync(path)) return null;
  const db = new Database(path, { readonly: true });
  try {
    const reasons: string[] = [];
    for (const [table, what] of [["tenants", "tenants"], ["audit_entries", "audit-entries"]] as const) {
      // Raw SQL: whether the table exists at all (a new file has none), then whether it has a row.
      const exists = db.query("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(table) !== null;
      if (exists && db.query(`SELECT 1 FROM ${table} LIMIT 1`).get() !== null) reasons.push(what);
    }
    return reasons.length > 0 ? `het heeft al ${reasons.join(" en ")}` : null;
  } finally {
    db.close();
  }
}

if (import.meta.main) {
  try {
    const values = parseOptions("demo-data", Bun.argv.slice(2), {
      help: { type: "boolean", short: "h" },
      db: { type: "string" },
      tenants: { type: "string" },
      admins: { type: "string" },
      audit: { type: "string" },
      logins: { type: "string" },
      backups: { type: "string" },
      seed: { type: "string" },
    });
    if (values.help) {
      console.log(USAGE);
      process.exit(0);
    }
    const path = values.db ?? process.env.DATABASE_PATH ?? "./data/nachtwacht.db";
    const sizes: DemoSizes = {
      tenants: parsePositive("tenants", values.tenants, DEMO_DEFAULT.tenants),
      admins: parsePositive("admins", values.admins, DEMO_DEFAULT.admins),
      audit: parsePositive("audit", values.audit, DEMO_DEFAULT.audit),
      logins: parsePositive("logins", values.logins, DEMO_DEFAULT.logins),
      backups: parsePositive("backups", values.backups, DEMO_DEFAULT.backups),
    };
    const seed = parsePositive("seed", values.seed, 42);
    const full = notEmptyReason(path);
    if (full !== null) {
      console.error(`demo-data: ${path} is niet leeg (${full}): demodata alleen in een nieuwe of lege database; geef met --db een nieuw bestand`);
      process.exit(2);
    }
    const store = openStore(path);
    const t0 = performance.now();
    fillDemoData(store.sqlite, sizes, new Date(), seed);
    store.close();
    console.log(JSON.stringify({ db: path, ...sizes, seconds: +((performance.now() - t0) / 1000).toFixed(2) }));
  } catch (e) {
    if (!(e instanceof OptionError)) throw e;
    console.error(`demo-data: ${e.message}\n${USAGE}`);
    process.exit(2);
  }
}
