// The schema check of audit-verificatie (src/audit/schema-guard.ts) against what a role
// with nachtwacht's own rights can do to nachtwacht's own triggers and functions: replace
// a function's body, put another trigger under the same name, disable one, add a
// nachtwacht_* function. On both stores; the PostgreSQL cases with NACHTWACHT_TEST_DB=pg.
import { afterEach, describe, expect, test } from "bun:test";
import { canonicalJson } from "../src/audit/chain.ts";
import { schemaAnomaliesPg, schemaAnomaliesSqlite } from "../src/audit/schema-guard.ts";
import { appendEntriesPg } from "../src/pg/chain.ts";
import { call, NOW } from "./helpers.ts";
import { addTenant, fillChain, makeEnv, pgOnly, sqliteOnly, type Env } from "./dialect.ts";

let env: Env;
afterEach(() => env?.cleanup());

const PATH = "/api/cron/audit-verificatie";

/** audit-verificatie's answer after `statements` ran on a database with one intact chain. */
async function afterTampering(statements: string[]): Promise<{ status: number; json: any }> {
  env = await makeEnv();
  const tenantId = await addTenant(env.db, "Gemeente Delft");
  await fillChain(env.store, tenantId, 3);
  for (const s of statements) await env.db.run(s);
  return call(env.app, PATH);
}

describe("schema check", () => {
  test("a freshly migrated database: nothing to report (on PostgreSQL every own trigger and function exactly as the guard expects)", async () => {
    env = await makeEnv();
    const found = env.store.kind === "pg" ? await schemaAnomaliesPg(env.store.sql, ["audit_entries", "tenants"]) : schemaAnomaliesSqlite(env.store.sqlite);
    expect(found).toEqual([]);
  });

  sqliteOnly("a trigger named after one of nachtwacht's PostgreSQL triggers is reported as any other: SQLite allows none by name", async () => {
    const r = await afterTampering(["CREATE TRIGGER tenants_keep_their_audit BEFORE DELETE ON tenants BEGIN SELECT 1; END"]);
    expect(r.status).toBe(409);
    expect(r.json.schema).toEqual({ intact: false, afwijkingen: ["trigger tenants_keep_their_audit op tenants"] });
  });

  pgOnly("nachtwacht_audit_rows_have_tenant() replaced by a body that rewrites the rows just inserted, hash included: every chain checks out, the function is reported (409, alarm)", async () => {
    env = await makeEnv();
    const tenantId = await addTenant(env.db, "Gemeente Delft");
    await fillChain(env.store, tenantId, 3);
    // The canonical text of src/audit/chain.ts, in SQL: the rewritten row's hash is right.
    await env.db.run(`CREATE OR REPLACE FUNCTION public.nachtwacht_audit_rows_have_tenant() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE public.audit_entries AS e SET details = '{}',
      hash = encode(sha256(convert_to('["nachtwacht-audit-v1",' || e.tenant_id || ',' || e.seq || ',' || to_json(e.created_at)::text || ',' || to_json(e.actor)::text || ','
        || to_json(e.action)::text || ',' || to_json(e.subject)::text || ',' || to_json('{}'::text)::text || ',' || to_json(e.prev_hash)::text || ']', 'UTF8')), 'hex')
    FROM new_rows AS n WHERE e.id = n.id AND n.subject = 'dossier/geheim';
  END IF;
  RETURN NULL;
END
$$`);
    if (env.store.kind !== "pg") throw new Error("pg only");
    const input = { tenantId, createdAt: NOW.toISOString(), actor: "mallory@example.nl", action: "dossier.bekeken", subject: "dossier/geheim", details: canonicalJson({ geheim: true }) };
    const [appended] = await env.store.sql.begin((tx) => appendEntriesPg(tx, [input]));
    const stored = await env.db.get<{ details: string; hash: string }>("SELECT details, hash FROM audit_entries WHERE tenant_id = ? AND seq = 4", tenantId);
    expect(stored!.details).toBe("{}");
    expect(stored!.hash).not.toBe(appended!.hash);

    const r = await call(env.app, PATH);
    expect(r.json.aantalGebroken).toBe(0);
    expect(r.json.resultaten).toEqual([{ tenantId, tenant: "Gemeente Delft", intact: true, aantalEntries: 4 }]);
    expect(r.status).toBe(409);
    expect(r.json.schema).toEqual({ intact: false, afwijkingen: ["functie public.nachtwacht_audit_rows_have_tenant() gewijzigd (code)"] });
    expect(env.alarms.raised.at(-1)!.message).toContain("Het schema van de database wijkt af van wat nachtwacht aanmaakte (functie public.nachtwacht_audit_rows_have_tenant() gewijzigd (code))");
  });

  const cases: [string, string[], string[]][] = [
    [
      "a trigger of nachtwacht's name that executes another function",
      [
        "CREATE FUNCTION public.stil() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "DROP TRIGGER audit_entries_have_tenant ON public.audit_entries",
        "CREATE TRIGGER audit_entries_have_tenant AFTER INSERT ON public.audit_entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.stil()",
      ],
      ["trigger audit_entries_have_tenant op audit_entries gewijzigd"],
    ],
    [
      "a trigger of nachtwacht's name on other events (no longer on DELETE)",
      [
        "DROP TRIGGER tenants_keep_their_audit ON public.tenants",
        "CREATE TRIGGER tenants_keep_their_audit BEFORE UPDATE OF id ON public.tenants FOR EACH ROW EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit()",
      ],
      ["trigger tenants_keep_their_audit op tenants gewijzigd"],
    ],
    [
      "a trigger of nachtwacht's name at another time (AFTER)",
      [
        "DROP TRIGGER tenants_keep_their_audit_truncate ON public.tenants",
        "CREATE TRIGGER tenants_keep_their_audit_truncate AFTER TRUNCATE ON public.tenants FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit()",
      ],
      ["trigger tenants_keep_their_audit_truncate op tenants gewijzigd"],
    ],
    [
      "a trigger of nachtwacht's name moved to another table",
      [
        "DROP TRIGGER tenants_keep_their_audit_truncate ON public.tenants",
        "CREATE TRIGGER tenants_keep_their_audit_truncate BEFORE TRUNCATE ON public.audit_entries FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit()",
      ],
      ["trigger tenants_keep_their_audit_truncate op audit_entries", "trigger tenants_keep_their_audit_truncate op tenants ontbreekt"],
    ],
    ["a trigger of nachtwacht's disabled", ["ALTER TABLE public.tenants DISABLE TRIGGER tenants_keep_their_audit"], ["trigger tenants_keep_their_audit op tenants uitgeschakeld"]],
    [
      "a trigger of nachtwacht's enabled for replication only",
      ["ALTER TABLE public.audit_entries ENABLE REPLICA TRIGGER audit_entries_have_tenant"],
      ["trigger audit_entries_have_tenant op audit_entries anders ingeschakeld (ENABLE REPLICA)"],
    ],
    ["a trigger of nachtwacht's dropped", ["DROP TRIGGER audit_entries_moved_have_tenant ON public.audit_entries"], ["trigger audit_entries_moved_have_tenant op audit_entries ontbreekt"]],
    [
      "a function of nachtwacht's renamed and a copy made under its name: its triggers execute the renamed one",
      [
        "ALTER FUNCTION public.nachtwacht_audit_rows_have_tenant() RENAME TO oud",
        "DO $$ BEGIN EXECUTE replace(pg_get_functiondef('public.oud()'::regprocedure), 'public.oud()', 'public.nachtwacht_audit_rows_have_tenant()'); END $$",
      ],
      ["trigger audit_entries_have_tenant op audit_entries gewijzigd", "trigger audit_entries_moved_have_tenant op audit_entries gewijzigd"],
    ],
    [
      "a function of nachtwacht's made security definer, its search_path reset",
      ["ALTER FUNCTION public.nachtwacht_tenant_keeps_audit() SECURITY DEFINER", "ALTER FUNCTION public.nachtwacht_tenant_keeps_audit() RESET search_path"],
      ["functie public.nachtwacht_tenant_keeps_audit() gewijzigd (security definer, instellingen)"],
    ],
    [
      "a function of nachtwacht's dropped with its triggers",
      ["DROP FUNCTION public.nachtwacht_tenant_keeps_audit() CASCADE"],
      ["trigger tenants_keep_their_audit op tenants ontbreekt", "trigger tenants_keep_their_audit_truncate op tenants ontbreekt", "functie public.nachtwacht_tenant_keeps_audit() ontbreekt"],
    ],
    [
      "nachtwacht_* functions nachtwacht did not make: another, an overload of its own, a procedure in another schema",
      [
        "CREATE FUNCTION public.nachtwacht_x() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "CREATE FUNCTION public.nachtwacht_tenant_keeps_audit(integer) RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "CREATE SCHEMA elders",
        "CREATE PROCEDURE elders.nachtwacht_y() LANGUAGE sql AS 'SELECT 1'",
      ],
      ["procedure elders.nachtwacht_y()", "functie public.nachtwacht_tenant_keeps_audit(integer)", "functie public.nachtwacht_x()"],
    ],
  ];
  for (const [name, statements, afwijkingen] of cases) {
    pgOnly(`${name}: reported (409)`, async () => {
      const r = await afterTampering(statements);
      expect(r.json.aantalGebroken).toBe(0);
      expect(r.json.schema).toEqual({ intact: false, afwijkingen });
      expect(r.status).toBe(409);
    });
  }
});
