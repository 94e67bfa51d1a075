// weekrapport on PostgreSQL (src/pg/weekly.ts) against a real server (test/pg.ts): the
// same week put into a SQLite and a PostgreSQL store gives the same result bodies, the
// same mails (recipients, subjects, HTML and text), the same alarms and the same
// delivery records — on a database with a linguistic (ICU) collation too, where text
// sorts otherwise than SQLite's bytes. The delivery bookkeeping keeps SQLite's
// exactly-once rules: a rerun sends only what is owed, and a send whose outcome was
// never recorded (the service died) is never sent again, only reported.
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { appendEntries, canonicalJson, recordLoginAttempt, type ChainInput } from "../src/audit/chain.ts";
import type { Deps } from "../src/deps.ts";
import { runWeekrapport } from "../src/jobs/weekrapport.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { weekLoginQueriesPg, weeklyQueriesPg, weekStatsQueriesPg } from "../src/pg/weekly.ts";
import { WEEK_MS, weeklyQueries, type WeeklyQueries } from "../src/reports/weekly.ts";
import { stateZegel, addAdmin, addTenant, call, makePgTestEnv, makeTestEnv, NOW, TEST_SEAL, type PgTestEnv, type TestEnv } from "./helpers.ts";
import { useTestCluster } from "./pg.ts";
import { startPgProxy, type PgProxy } from "./pg-proxy.ts";

setDefaultTimeout(120_000);

// RUN = Sunday 2026-07-26T18:00Z, weekrapport's fire time in ISO week 2026-W30; the report
// covers 19/07 18:00Z .. RUN. The installations' clock (recorded deliveries) stays at NOW.
const RUN = new Date("2026-07-26T18:00:00.000Z");
const DAY = 24 * 3600 * 1000;
const ago = (ms: number) => new Date(RUN.getTime() - ms);
const VAN = ago(WEEK_MS);

const cluster = useTestCluster();

const toClean: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of toClean.splice(0).reverse()) await f();
});

interface Delivery {
  administratorId: number;
  tenantId: number;
  isoWeek: string;
  verstuurd: string;
}

/** Puts a week's data into one store; the same calls on both stores give the same rows (and ids: both start empty). */
interface Seed {
  tenant(naam: string, actief?: boolean): Promise<number>;
  admin(tenantId: number, email: string, actief?: boolean): Promise<number>;
  audit(entries: { tenantId: number; action: string; at: Date }[]): Promise<void>;
  logins(attempts: { tenantId: number | null; ip: string; gelukt: boolean; at: Date }[]): Promise<void>;
  verified(tenantId: number, v: { gecontroleerd: string; intact: boolean; aantalEntries: number; foutSeq?: number; foutReden?: string }): Promise<void>;
  delivery(d: Delivery): Promise<void>;
  /** The delivery records, in key order. */
  deliveries(): Promise<Delivery[]>;
  /** Runs a statement an operator would type (the alarm's advice). */
  exec(statement: string): Promise<void>;
}

const chainInputs = (entries: { tenantId: number; action: string; at: Date }[]): ChainInput[] =>
  entries.map((e, i) => ({ tenantId: e.tenantId, createdAt: e.at.toISOString(), actor: "beheer", action: e.action, subject: `dossier-${i}`, details: canonicalJson({}) }));

const byKey = (rows: Delivery[]) =>
  rows.sort((x, y) => x.administratorId - y.administratorId || x.tenantId - y.tenantId || (x.isoWeek < y.isoWeek ? -1 : x.isoWeek > y.isoWeek ? 1 : 0));

function sqliteSeed(env: TestEnv): Seed {
  const s = env.store.sqlite;
  return {
    tenant: async (naam, actief = true) => addTenant(env.store, naam, actief),
    admin: async (tenantId, email, actief = true) => addAdmin(env.store, tenantId, email, actief),
    audit: async (entries) => {
      s.transaction(() => appendEntries(s, chainInputs(entries))).immediate();
    },
    logins: async (attempts) => {
      for (const a of attempts) recordLoginAttempt(s, { tenantId: a.tenantId, account: "gebruiker", ip: a.ip, gelukt: a.gelukt, tijdstip: a.at });
    },
    verified: async (tenantId, v) => {
      s.query(
        "INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      ).run(tenantId, v.gecontroleerd, v.intact ? 1 : 0, v.aantalEntries, v.foutSeq ?? null, v.foutSeq ?? null, v.foutReden ?? null, stateZegel({ tenantId, ...v, foutEntryId: v.foutSeq }));
    },
    delivery: async (d) => {
      s.query("INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (?, ?, ?, ?)").run(d.administratorId, d.tenantId, d.isoWeek, d.verstuurd);
    },
    deliveries: async () =>
      byKey(s.query("SELECT administrator_id AS administratorId, tenant_id AS tenantId, iso_week AS isoWeek, verstuurd FROM weekly_report_deliveries").all() as Delivery[]),
    exec: async (statement) => {
      s.run(statement);
    },
  };
}

function pgSeed(env: PgTestEnv): Seed {
  const sql = env.store.sql;
  return {
    tenant: async (naam, actief = true) => {
      const [row] = await sql`INSERT INTO tenants (naam, actief, aangemaakt) VALUES (${naam}, ${actief}, ${NOW.toISOString()}) RETURNING id`;
      return row.id as number;
    },
    admin: async (tenantId, email, actief = true) => {
      const [row] = await sql`INSERT INTO administrators (tenant_id, naam, email, actief) VALUES (${tenantId}, ${email.split("@")[0]!}, ${email}, ${actief}) RETURNING id`;
      return row.id as number;
    },
    audit: async (entries) => {
      await sql.begin((tx) => appendEntriesPg(tx, chainInputs(entries)));
    },
    logins: async (attempts) => {
      const rows = attempts.map((a) => ({ tijdstip: a.at.toISOString(), account: "gebruiker", ip: a.ip, gelukt: a.gelukt, reden: null, tenant_id: a.tenantId }));
      if (rows.length > 0) await sql`INSERT INTO login_attempts ${sql(rows)}`;
    },
    verified: async (tenantId, v) => {
      await sql`
        INSERT INTO audit_verification_state (tenant_id, gecontroleerd, intact, aantal_entries, fout_seq, fout_entry_id, fout_reden, zegel)
        VALUES (${tenantId}, ${v.gecontroleerd}, ${v.intact}, ${v.aantalEntries}, ${v.foutSeq ?? null}, ${v.foutSeq ?? null}, ${v.foutReden ?? null}, ${stateZegel({ tenantId, ...v, foutEntryId: v.foutSeq })})`;
    },
    delivery: async (d) => {
      await sql`INSERT INTO weekly_report_deliveries (administrator_id, tenant_id, iso_week, verstuurd) VALUES (${d.administratorId}, ${d.tenantId}, ${d.isoWeek}, ${d.verstuurd})`;
    },
    deliveries: async () =>
      byKey(
        (await sql`SELECT administrator_id AS "administratorId", tenant_id AS "tenantId", iso_week AS "isoWeek", verstuurd FROM weekly_report_deliveries`) as Delivery[],
      ),
    exec: async (statement) => {
      await sql.unsafe(statement);
    },
  };
}

interface Side {
  name: "sqlite" | "pg";
  env: TestEnv | PgTestEnv;
  deps: Deps;
  seed: Seed;
}

/** A SQLite and a PostgreSQL store side by side, each with its app, recording mailer and alarms; `icuLocale` gives the PostgreSQL database a linguistic collation. */
async function bothStores(o: { icuLocale?: string } = {}): Promise<[Side, Side]> {
  const sqlite = makeTestEnv();
  toClean.push(() => sqlite.cleanup());
  const pg = await makePgTestEnv({ createDatabase: () => cluster.createDatabase(undefined, o.icuLocale ? { icuLocale: o.icuLocale } : {}) });
  toClean.push(() => pg.cleanup());
  return [
    { name: "sqlite", env: sqlite, deps: sqlite.deps, seed: sqliteSeed(sqlite) },
    { name: "pg", env: pg, deps: pg.deps, seed: pgSeed(pg) },
  ];
}

/** What a run leaves that anyone sees: its result, the mails, the alarms, the delivery records. */
async function outcome(side: Side, run: Promise<unknown>) {
  const sentBefore = side.env.mailer.sent.length;
  const alarmsBefore = side.env.alarms.raised.length;
  const result = await run;
  return {
    result,
    mails: side.env.mailer.sent.slice(sentBefore),
    alarms: side.env.alarms.raised.slice(alarmsBefore),
    deliveries: await side.seed.deliveries(),
  };
}

/**
 * A week with something for every part of the report: tenants active and not, shared
 * and inactive administrators, audit actions with tied counts that sort differently by
 * bytes and by a linguistic collation, entries on both edges of the week, failing IPs
 * beyond the top five with ties, a tenant with suspiciously many failures, attempts
 * without a tenant, chains intact, broken, verified long ago and never, and delivery
 * records of earlier weeks, some old enough to be pruned.
 */
async function fillWeek(seed: Seed) {
  const alfa = await seed.tenant("Alfa BV");
  const beta = await seed.tenant("Beta BV");
  const gamma = await seed.tenant("Gamma BV (opgeheven)", false);
  const delta = await seed.tenant("Delta BV");
  await seed.tenant("Epsilon BV (geen beheerders)");
  const anna = await seed.admin(alfa, "anna@alfa.test");
  await seed.admin(alfa, "oud@alfa.test", false);
  await seed.admin(alfa, "gedeeld@example.test");
  await seed.admin(alfa, "weg@alfa.test");
  await seed.admin(beta, "gedeeld@example.test");
  await seed.admin(beta, "bert@beta.test");
  await seed.admin(gamma, "carl@gamma.test");
  await seed.admin(delta, "dirk@delta.test");

  const audit: { tenantId: number; action: string; at: Date }[] = [];
  const times = (n: number, tenantId: number, action: string, from: number) => {
    for (let i = 0; i < n; i++) audit.push({ tenantId, action, at: ago(from - i * 1000) });
  };
  audit.push({ tenantId: alfa, action: "dossier.verwijderd", at: ago(WEEK_MS + 1) }); // before the week
  audit.push({ tenantId: alfa, action: "dossier.bekeken", at: VAN }); // its first instant counts
  times(3, alfa, "dossier.bekeken", 6 * DAY);
  times(3, alfa, "dossier.gewijzigd", 5 * DAY);
  // Tied at two: bytes order them Dossier.export, dossier.archief, dossier_import, één.actie;
  // a linguistic collation puts dossier.archief first.
  for (const action of ["één.actie", "dossier_import", "dossier.archief", "Dossier.export"]) times(2, alfa, action, 4 * DAY);
  audit.push({ tenantId: alfa, action: "dossier.verwijderd", at: RUN }); // the end is not in the week
  times(2, beta, "factuur.verstuurd", 2 * DAY);
  times(1, gamma, "dossier.bekeken", DAY);
  await seed.audit(audit);

  const logins: { tenantId: number | null; ip: string; gelukt: boolean; at: Date }[] = [];
  const attempts = (n: number, tenantId: number | null, ip: string, gelukt: boolean, from = DAY) => {
    for (let i = 0; i < n; i++) logins.push({ tenantId, ip, gelukt, at: ago(from - i) });
  };
  attempts(5, alfa, "10.0.0.1", true, 2 * DAY);
  for (const [ip, n] of [["203.0.113.9", 3], ["198.51.100.7", 2], ["198.51.100.10", 2], ["10.0.0.5", 2], ["10.0.0.40", 1], ["192.0.2.1", 1], ["192.0.2.10", 1]] as const) {
    attempts(n, alfa, ip, false, 3 * DAY);
  }
  logins.push({ tenantId: alfa, ip: "10.9.9.9", gelukt: false, at: ago(WEEK_MS + 1) });
  logins.push({ tenantId: alfa, ip: "10.9.9.9", gelukt: false, at: RUN });
  logins.push({ tenantId: alfa, ip: "10.0.0.1", gelukt: true, at: VAN });
  // Beta: 30 failures against 10 successes, worth a word in its report.
  attempts(10, beta, "10.1.0.1", true);
  attempts(18, beta, "203.0.113.50", false, 5 * DAY);
  attempts(12, beta, "203.0.113.51", false, 4 * DAY);
  attempts(4, null, "10.0.0.5", false);
  attempts(3, gamma, "10.2.0.1", false);
  await seed.logins(logins);

  await seed.verified(alfa, { gecontroleerd: "2026-07-26T01:00:05.000Z", intact: true, aantalEntries: 15 });
  await seed.verified(beta, { gecontroleerd: "2026-07-23T01:00:00.000Z", intact: false, aantalEntries: 120, foutSeq: 57, foutReden: "hash-afwijkend" });
  await seed.verified(delta, { gecontroleerd: "2026-07-19T01:00:00.000Z", intact: true, aantalEntries: 0 });

  for (const isoWeek of ["2025-W52", "2026-W17", "2026-W18", "2026-W29"]) {
    await seed.delivery({ administratorId: anna, tenantId: alfa, isoWeek, verstuurd: "2026-01-01T00:00:00.000Z" });
  }
}

describe("weekrapport on PostgreSQL: the same reports as on SQLite", () => {
  for (const [collation, icuLocale] of [["the cluster's C.UTF-8", undefined], ["a linguistic ICU collation (en-US)", "en-US"]] as const) {
    test(`one week on both stores, PostgreSQL with ${collation}: equal result bodies, mails, alarms and delivery records`, async () => {
      const sides = await bothStores({ icuLocale });
      const outcomes = [];
      for (const side of sides) {
        await fillWeek(side.seed);
        side.env.mailer.refuse.add("weg@alfa.test");
        outcomes.push(await outcome(side, runWeekrapport(side.deps, RUN)));
      }
      const [onSqlite, onPg] = outcomes;
      expect(onPg).toEqual(onSqlite!);

      // And what they agree on is the report: not two stores wrong the same way.
      expect(onPg!.result).toEqual({ status: 502, body: { verstuurd: 5, fouten: 1, overgeslagen: 0, bezorging: "smtp", week: "2026-W30" } });
      expect(onPg!.mails.map((m) => `${m.to} ${m.subject}`)).toEqual([
        "anna@alfa.test Weekrapport week 30: alles in orde — Alfa BV",
        "gedeeld@example.test Weekrapport week 30: alles in orde — Alfa BV",
        "gedeeld@example.test Weekrapport week 30: actie nodig — Beta BV",
        "bert@beta.test Weekrapport week 30: actie nodig — Beta BV",
        "dirk@delta.test Weekrapport week 30: aandacht nodig — Delta BV",
      ]);
      const alfa = onPg!.mails[0]!.text;
      expect(alfa).toContain("Audit-gebeurtenissen: 15");
      expect(alfa).toMatch(/dossier\.bekeken\s+4[\s\S]*dossier\.gewijzigd\s+3[\s\S]*Dossier\.export\s+2[\s\S]*dossier\.archief\s+2[\s\S]*dossier_import\s+2[\s\S]*één\.actie\s+2/);
      expect(alfa).not.toContain("dossier.verwijderd");
      expect(alfa).toContain("Geslaagde inlogpogingen: 6");
      expect(alfa).toContain("Mislukte inlogpogingen: 12");
      expect(alfa).toMatch(/IP-adressen met mislukte pogingen\s+7/);
      expect(alfa).toMatch(/203\.0\.113\.9\s+3[\s\S]*10\.0\.0\.5\s+2[\s\S]*198\.51\.100\.10\s+2[\s\S]*198\.51\.100\.7\s+2[\s\S]*10\.0\.0\.40\s+1/);
      expect(alfa).not.toContain("192.0.2.1");
      expect(onPg!.mails[2]!.text).toContain("De auditketen is gebroken bij volgnummer 57");
      expect(onPg!.mails[2]!.text).toContain("Opvallend veel mislukte inlogpogingen: 30 van 40, vanaf 2 IP-adressen.");
      expect(onPg!.mails[4]!.text).toContain("langer dan twee dagen geleden");
      expect(onPg!.alarms.map((a) => a.type)).toEqual(["mail-failure"]);
      // Pruned: weeks before 2026-W18; the refused message has no record, so a rerun sends it.
      expect(onPg!.deliveries.map((d) => `${d.administratorId} ${d.isoWeek} ${d.verstuurd}`)).toEqual([
        "1 2026-W18 2026-01-01T00:00:00.000Z",
        "1 2026-W29 2026-01-01T00:00:00.000Z",
        "1 2026-W30 2026-07-23T12:00:00.000Z",
        "3 2026-W30 2026-07-23T12:00:00.000Z",
        "5 2026-W30 2026-07-23T12:00:00.000Z",
        "6 2026-W30 2026-07-23T12:00:00.000Z",
        "8 2026-W30 2026-07-23T12:00:00.000Z",
      ]);
    });
  }

  test("the job route on PostgreSQL answers as on SQLite", async () => {
    const responses = [];
    for (const side of await bothStores()) {
      await fillWeek(side.seed);
      side.env.setNow(RUN);
      const res = await call(side.env.app, "/api/cron/weekrapport");
      responses.push({ status: res.status, body: res.json, mails: side.env.mailer.sent.map((m) => m.to) });
    }
    expect(responses[1]).toEqual(responses[0]!);
    expect(responses[1]).toMatchObject({ status: 200, body: { verstuurd: 6, fouten: 0, overgeslagen: 0, week: "2026-W30" } });
  });
});

describe("weekrapport on PostgreSQL: exactly once, as on SQLite", () => {
  test("a rerun in the same ISO week sends only what failed, the next one nothing, a new week everything again", async () => {
    const runs: Awaited<ReturnType<typeof outcome>>[][] = [[], []];
    const sides = await bothStores();
    for (const [i, side] of sides.entries()) {
      await fillWeek(side.seed);
      side.env.mailer.refuse.add("weg@alfa.test");
      runs[i]!.push(await outcome(side, runWeekrapport(side.deps, RUN)));
      side.env.mailer.refuse.clear();
      const tuesday = new Date(RUN.getTime() + 2 * DAY); // still the week of Sunday's fire time, 2026-W30
      runs[i]!.push(await outcome(side, runWeekrapport(side.deps, tuesday)));
      runs[i]!.push(await outcome(side, runWeekrapport(side.deps, tuesday)));
      runs[i]!.push(await outcome(side, runWeekrapport(side.deps, new Date(RUN.getTime() + 7 * DAY))));
    }
    const [onSqlite, onPg] = runs;
    expect(onPg).toEqual(onSqlite!);
    expect(onPg!.map((r) => (r.result as { body: unknown }).body)).toMatchObject([
      { verstuurd: 5, fouten: 1, overgeslagen: 0, week: "2026-W30" },
      { verstuurd: 1, fouten: 0, overgeslagen: 5, week: "2026-W30" },
      { verstuurd: 0, fouten: 0, overgeslagen: 6, week: "2026-W30" },
      { verstuurd: 6, fouten: 0, overgeslagen: 0, week: "2026-W31" },
    ]);
    expect(onPg!.map((r) => r.mails.map((m) => m.to))).toEqual([
      ["anna@alfa.test", "gedeeld@example.test", "gedeeld@example.test", "bert@beta.test", "dirk@delta.test"],
      ["weg@alfa.test"],
      [],
      ["anna@alfa.test", "gedeeld@example.test", "weg@alfa.test", "gedeeld@example.test", "bert@beta.test", "dirk@delta.test"],
    ]);
  });

  test("two runs of the same week at once (a lease that lapsed, two instances) send each report once: a reservation is a claim, and the run that loses it skips that recipient", async () => {
    for (const side of await bothStores()) {
      await fillWeek(side.seed);
      const [one, two] = await Promise.all([runWeekrapport(side.deps, RUN), runWeekrapport(side.deps, RUN)]);
      const to = side.env.mailer.sent.map((m) => m.to).sort();
      expect(to).toEqual(["anna@alfa.test", "bert@beta.test", "dirk@delta.test", "gedeeld@example.test", "gedeeld@example.test", "weg@alfa.test"]);
      expect((one.body as { verstuurd: number }).verstuurd + (two.body as { verstuurd: number }).verstuurd).toBe(6);
    }
  });

  test("the service dies between the transport's acceptance and the record: no rerun sends it again, each reports it as onzeker, and the alarm's advice releases it", async () => {
    const runs: unknown[][] = [[], []];
    for (const [i, side] of (await bothStores()).entries()) {
      const alfa = await side.seed.tenant("Alfa BV");
      await side.seed.admin(alfa, "anna@alfa.test");
      // The clock is read only to record an accepted message: failing there leaves the
      // delivery as dying after the server's "250 OK" and before the record does. That run
      // itself counts it as onzeker (the record failed), and so does every rerun.
      const dying: Deps = { ...side.deps, clock: () => { throw new Error("stroomuitval"); } };
      const died = await runWeekrapport(dying, RUN);
      expect(died.body).toEqual({ verstuurd: 0, fouten: 0, overgeslagen: 0, onzeker: 1, bezorging: "smtp", week: "2026-W30" });
      expect(side.env.alarms.raised.map((a) => a.personal?.context)).toMatchObject([{ onzeker: [{ adres: "anna@alfa.test", fout: expect.stringContaining("stroomuitval") }] }]);
      expect(side.env.mailer.sent.map((m) => m.to)).toEqual(["anna@alfa.test"]);
      runs[i]!.push(await side.seed.deliveries());

      await side.seed.admin(alfa, "piet@alfa.test");
      const rerun = await outcome(side, runWeekrapport(side.deps, RUN));
      runs[i]!.push(rerun, await outcome(side, runWeekrapport(side.deps, RUN)));

      // What the alarm tells an operator to run, when the mail server's log shows the message never arrived.
      const advice = /DELETE FROM weekly_report_deliveries WHERE [^,]*'verzenden'/.exec(rerun.alarms[0]!.message)![0];
      await side.seed.exec(advice);
      runs[i]!.push(await outcome(side, runWeekrapport(side.deps, RUN)));
    }
    const [onSqlite, onPg] = runs;
    expect(onPg).toEqual(onSqlite!);
    const [crashed, rerun, again, released] = onPg as [Delivery[], ...Awaited<ReturnType<typeof outcome>>[]];
    expect(crashed).toEqual([{ administratorId: 1, tenantId: 1, isoWeek: "2026-W30", verstuurd: "verzenden" }]);
    expect(rerun!.result).toEqual({ status: 409, body: { verstuurd: 1, fouten: 0, overgeslagen: 1, onzeker: 1, bezorging: "smtp", week: "2026-W30" } });
    expect(rerun!.mails.map((m) => m.to)).toEqual(["piet@alfa.test"]);
    expect(rerun!.alarms).toHaveLength(1);
    expect(rerun!.alarms[0]).toMatchObject({ type: "mail-failure", context: { week: "2026-W30", aantal: 1 }, personal: { context: { onzeker: [{ adres: "anna@alfa.test", tenantId: 1 }] } } });
    expect(again!.result).toMatchObject({ body: { verstuurd: 0, overgeslagen: 2, onzeker: 1 } });
    expect(again!.mails).toEqual([]);
    expect(released!.result).toEqual({ status: 200, body: { verstuurd: 1, fouten: 0, overgeslagen: 1, bezorging: "smtp", week: "2026-W30" } });
    expect(released!.mails.map((m) => m.to)).toEqual(["anna@alfa.test"]);
    expect(released!.deliveries.map((d) => d.verstuurd)).toEqual(["2026-07-23T12:00:00.000Z", "2026-07-23T12:00:00.000Z"]);
  });

  test("a reservation whose COMMIT's answer is lost (the connection cut after the server committed) is found stored: the message is sent, not left as uncertain for ever", async () => {
    let proxy: PgProxy | undefined;
    const pg = await makePgTestEnv({
      createDatabase: async () => {
        proxy = await startPgProxy(await cluster.createDatabase());
        return proxy.url;
      },
    });
    toClean.push(async () => {
      await pg.cleanup();
      await proxy!.close();
    });
    const seed = pgSeed(pg);
    const t = await seed.tenant("Alfa BV");
    const a = { administratorId: await seed.admin(t, "anna@alfa.test"), tenantId: t };
    const q = weeklyQueriesPg(pg.store, TEST_SEAL, pg.config);
    let cut = false;
    void proxy!.cutNextCommit("after").then(() => (cut = true));
    expect(await q.reserveDelivery(a, "2026-W30")).toBe(true);
    expect(cut).toBe(true);
    expect(await seed.deliveries()).toEqual([{ administratorId: a.administratorId, tenantId: t, isoWeek: "2026-W30", verstuurd: "verzenden" }]);
  });

  test("the bookkeeping's rules on both stores: a reservation never replaces a record, a release removes only a reservation, a record replaces only a reservation", async () => {
    const tables: Delivery[][][] = [[], []];
    for (const [i, side] of (await bothStores()).entries()) {
      const q: WeeklyQueries = side.env.store.kind === "pg" ? weeklyQueriesPg(side.env.store, TEST_SEAL, side.env.config) : weeklyQueries(side.env.store.db, TEST_SEAL, side.env.config);
      const t = await side.seed.tenant("Alfa BV");
      const a = { administratorId: await side.seed.admin(t, "anna@alfa.test"), tenantId: t };
      const b = { administratorId: await side.seed.admin(t, "bert@alfa.test"), tenantId: t };
      const later = new Date(NOW.getTime() + 3600_000);
      const step = async (f: () => Promise<unknown>) => {
        await f();
        tables[i]!.push(await side.seed.deliveries());
      };
      expect(await q.reserveDelivery(a, "2026-W30")).toBe(true);
      tables[i]!.push(await side.seed.deliveries());
      // A second reservation claims nothing: not while reserved, not once recorded.
      expect(await q.reserveDelivery(a, "2026-W30")).toBe(false);
      await step(() => q.recordDelivery(a, "2026-W30", NOW));
      expect(await q.reserveDelivery(a, "2026-W30")).toBe(false);
      tables[i]!.push(await side.seed.deliveries());
      await step(() => q.releaseDelivery(a, "2026-W30"));
      await step(() => q.recordDelivery(a, "2026-W30", later));
      await step(() => q.reserveDelivery(b, "2026-W30"));
      await step(() => q.releaseDelivery(b, "2026-W30"));
      await step(() => q.pruneDeliveries("2026-W31"));
      expect((await q.weekRecipients("2026-W30", 10)).map((r) => [r.email, r.alVerstuurd])).toEqual([
        ["anna@alfa.test", false],
        ["bert@alfa.test", false],
      ]);
      expect(await q.uncertainDeliveries()).toEqual([]);
      await q.reserveDelivery(b, "2026-W30");
      await q.recordDelivery(a, "2026-W30", NOW);
      expect((await q.weekRecipients("2026-W30", 10)).map((r) => [r.email, r.alVerstuurd])).toEqual([
        ["anna@alfa.test", true],
        ["bert@alfa.test", true],
      ]);
      // Reserved and never recorded: uncertain; recorded: not.
      expect((await q.uncertainDeliveries()).map((d) => [d.email, d.isoWeek])).toEqual([["bert@alfa.test", "2026-W30"]]);
    }
    const [onSqlite, onPg] = tables;
    expect(onPg).toEqual(onSqlite!);
    const week = (verstuurd: string) => [{ administratorId: 1, tenantId: 1, isoWeek: "2026-W30", verstuurd }];
    expect(onPg).toEqual([
      week("verzenden"),
      week(NOW.toISOString()),
      week(NOW.toISOString()),
      week(NOW.toISOString()),
      week(NOW.toISOString()),
      [...week(NOW.toISOString()), { administratorId: 2, tenantId: 1, isoWeek: "2026-W30", verstuurd: "verzenden" }],
      week(NOW.toISOString()),
      [],
    ]);
  });
});

describe("weekrapport on PostgreSQL: the statistics use indexes", () => {
  test("with sequential scans discouraged, each statement reads its table through the index SQLite's uses: per tenant by (tenant_id, created_at), logins by tijdstip, failures by the partial index", async () => {
    const env = await makePgTestEnv(cluster);
    toClean.push(() => env.cleanup());
    const { db } = env.store;
    const statements = { ...weekStatsQueriesPg(db, 1, VAN, RUN), ...weekLoginQueriesPg(db, VAN, RUN) };
    const conn = await env.store.sql.reserve();
    try {
      // On empty tables a sequential scan is cheapest; discouraged, the planner shows which index it can use.
      await conn`SET enable_seqscan = off`;
      const plans: Record<string, string> = {};
      for (const [name, statement] of Object.entries(statements)) {
        const { sql, params } = statement.toSQL();
        const rows = (await conn.unsafe(`EXPLAIN ${sql}`, params as unknown[])) as { "QUERY PLAN": string }[];
        plans[name] = rows.map((r) => r["QUERY PLAN"]).join("\n");
      }
      for (const [name, plan] of Object.entries(plans)) expect({ name, plan }).not.toMatchObject({ plan: expect.stringContaining("Seq Scan") });
      expect(plans.auditPerActie).toContain("audit_entries_tenant_created_idx");
      expect(plans.perTenant).toContain("login_attempts_tijdstip_idx");
      expect(plans.mislukt).toContain("login_attempts_failed_idx");
      expect(plans.keten).toContain("audit_verification_state_pkey");
    } finally {
      conn.release();
    }
  });
});
