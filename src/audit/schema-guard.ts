// What audit-verificatie checks of the database's schema besides the rows. Whoever can
// change the schema (anyone who writes the SQLite file; on PostgreSQL a role that owns
// nachtwacht's tables) could put something between nachtwacht and its tables: a trigger
// that rewrites an entry after it is stored (on PostgreSQL even with its hash recomputed,
// so the chain still links and audit-anker would sign it), a rule, a row security policy,
// or a view. nachtwacht's migrations create none of these but a few guard triggers on
// PostgreSQL and the functions they execute; those must be exactly as the migrations
// left them (the same role could replace a function's body, or a trigger of the same
// name), and anything else is reported (docs/audit-chain.md, "The schema").
import type { Database } from "bun:sqlite";
import type { SQL } from "bun";
import { sha256Hex } from "./chain.ts";

/**
 * Every trigger, and every view, in the SQLite file: nachtwacht makes none, so none is
 * allowed by its name (whatever its SQL).
 */
export function schemaAnomaliesSqlite(sqlite: Database): string[] {
  // Raw SQL: sqlite_schema is SQLite's own table, outside the Drizzle schema.
  const rows = sqlite.query("SELECT type, name, tbl_name AS tabel FROM sqlite_schema WHERE type IN ('trigger', 'view') ORDER BY type, name").all() as {
    type: "trigger" | "view";
    name: string;
    tabel: string;
  }[];
  return rows.map((r) => (r.type === "trigger" ? `trigger ${r.name} op ${r.tabel}` : `view ${r.name}`));
}

/**
 * The triggers nachtwacht's PostgreSQL migrations create (0002, after 0003), by
 * table.trigger: each as pg_get_triggerdef gives it with every name schema-qualified
 * (search_path pg_catalog), which is the migrations' own text, and enabled.
 */
export const PG_OWN_TRIGGERS: ReadonlyMap<string, string> = new Map([
  [
    "audit_entries.audit_entries_have_tenant",
    "CREATE TRIGGER audit_entries_have_tenant AFTER INSERT ON public.audit_entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_audit_rows_have_tenant()",
  ],
  [
    "audit_entries.audit_entries_moved_have_tenant",
    "CREATE TRIGGER audit_entries_moved_have_tenant AFTER UPDATE ON public.audit_entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_audit_rows_have_tenant()",
  ],
  ["tenants.tenants_keep_their_audit", "CREATE TRIGGER tenants_keep_their_audit BEFORE DELETE OR UPDATE OF id ON public.tenants FOR EACH ROW EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit()"],
  ["tenants.tenants_keep_their_audit_truncate", "CREATE TRIGGER tenants_keep_their_audit_truncate BEFORE TRUNCATE ON public.tenants FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit()"],
]);

/** What decides what a PostgreSQL function does, as schemaAnomaliesPg reads it from pg_proc. */
export interface PgFunctionDefinition {
  /** prokind: f function, p procedure, a aggregate, w window function. */
  soort: string;
  taal: string;
  resultaattype: string;
  securityDefiner: boolean;
  /** proconfig: the function's own SET clauses. */
  instellingen: readonly string[];
  /** SHA-256 (hex) of prosrc: the body, the text between the $$ of its CREATE FUNCTION. */
  code: string;
}

const TRIGGER_FUNCTION = { soort: "f", taal: "plpgsql", resultaattype: "trigger", securityDefiner: false, instellingen: ["search_path=pg_catalog, pg_temp"] } as const;

/**
 * The functions nachtwacht's PostgreSQL migrations create, by signature: 0002's, with
 * nachtwacht_tenant_keeps_audit as 0003 replaced it. A migration that changes one, or a
 * trigger, changes it here too (test/schema-guard.test.ts fails until it does).
 */
export const PG_OWN_FUNCTIONS: ReadonlyMap<string, PgFunctionDefinition> = new Map([
  ["public.nachtwacht_audit_rows_have_tenant()", { ...TRIGGER_FUNCTION, code: "5671e05094bd79908843bb92228991114505d62f271f8edc3ebbabe47bdb40b6" }],
  ["public.nachtwacht_tenant_keeps_audit()", { ...TRIGGER_FUNCTION, code: "ebc602aa9a6d790c04f3b965e7518826bc75dbe6290fc21b97372d23f7f4c557" }],
]);

/** The words for prokind in the anomalies. */
const SOORT: Record<string, string> = { f: "functie", p: "procedure", a: "aggregaat", w: "vensterfunctie" };

/**
 * On PostgreSQL, in nachtwacht's schema (public): triggers other than PG_OWN_TRIGGERS,
 * and any of those changed, disabled or missing; functions named nachtwacht_* (in any
 * schema) other than PG_OWN_FUNCTIONS, and any of those changed or missing; rules, row
 * security (policies or switched on), views; and a table or view named after one of
 * nachtwacht's tables in any other schema (not another session's temporary one).
 */
export async function schemaAnomaliesPg(sql: SQL, tables: readonly string[]): Promise<string[]> {
  return sql.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (tx) => {
    // Every name that pg_get_triggerdef (the function a trigger executes too), regprocedure
    // and format_type write schema-qualified, whatever the session's search_path.
    await tx`SET LOCAL search_path = pg_catalog, pg_temp`;
    const out: string[] = [];
    const triggers = (await tx`
      SELECT c.relname AS tabel, t.tgname AS naam, pg_get_triggerdef(t.oid) AS definitie, t.tgenabled AS aan
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND NOT t.tgisinternal ORDER BY 1, 2`) as { tabel: string; naam: string; definitie: string; aan: string }[];
    const seen = new Set<string>();
    for (const t of triggers) {
      const key = `${t.tabel}.${t.naam}`;
      const expected = PG_OWN_TRIGGERS.get(key);
      if (expected === undefined) {
        out.push(`trigger ${t.naam} op ${t.tabel}`);
        continue;
      }
      seen.add(key);
      if (t.definitie !== expected) out.push(`trigger ${t.naam} op ${t.tabel} gewijzigd`);
      // 'O' is enabled (the default); D disabled, R only for replication, A always.
      if (t.aan === "D") out.push(`trigger ${t.naam} op ${t.tabel} uitgeschakeld`);
      else if (t.aan !== "O") out.push(`trigger ${t.naam} op ${t.tabel} anders ingeschakeld (${t.aan === "R" ? "ENABLE REPLICA" : t.aan === "A" ? "ENABLE ALWAYS" : t.aan})`);
    }
    for (const key of PG_OWN_TRIGGERS.keys()) {
      if (seen.has(key)) continue;
      const [tabel, naam] = key.split(".");
      out.push(`trigger ${naam} op ${tabel} ontbreekt`);
    }
    const functions = (await tx`
      SELECT p.oid::regprocedure::text AS naam, p.prokind AS soort, l.lanname AS taal, format_type(p.prorettype, NULL) AS resultaattype,
        p.prosecdef AS "securityDefiner", coalesce(p.proconfig, '{}') AS instellingen, p.prosrc AS code
      FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
      WHERE p.proname ILIKE 'nachtwacht\\_%' ORDER BY 1`) as (PgFunctionDefinition & { naam: string })[];
    const seenFunctions = new Set<string>();
    for (const f of functions) {
      const soort = SOORT[f.soort] ?? `functie (${f.soort})`;
      const expected = PG_OWN_FUNCTIONS.get(f.naam);
      if (expected === undefined) {
        out.push(`${soort} ${f.naam}`);
        continue;
      }
      seenFunctions.add(f.naam);
      const actual = { ...f, code: sha256Hex(f.code) };
      const changed = (["code", "taal", "resultaattype", "securityDefiner", "instellingen", "soort"] as const).filter(
        (k) => JSON.stringify(actual[k]) !== JSON.stringify(expected[k]),
      );
      if (changed.length > 0) out.push(`${soort} ${f.naam} gewijzigd (${changed.map((k) => (k === "securityDefiner" ? "security definer" : k)).join(", ")})`);
    }
    for (const naam of PG_OWN_FUNCTIONS.keys()) if (!seenFunctions.has(naam)) out.push(`functie ${naam} ontbreekt`);
    const rules = (await tx`SELECT tablename AS tabel, rulename AS naam FROM pg_rules WHERE schemaname = 'public' ORDER BY 1, 2`) as { tabel: string; naam: string }[];
    for (const r of rules) out.push(`regel ${r.naam} op ${r.tabel}`);
    const secured = (await tx`
      SELECT c.relname AS tabel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND (c.relrowsecurity OR EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid)) ORDER BY 1`) as { tabel: string }[];
    for (const s of secured) out.push(`rijbeveiliging (row level security) op ${s.tabel}`);
    const views = (await tx`SELECT viewname AS naam FROM pg_views WHERE schemaname = 'public' ORDER BY 1`) as { naam: string }[];
    for (const v of views) out.push(`view ${v.naam}`);
    const elsewhere = (await tx`
      SELECT n.nspname AS schema, c.relname AS naam FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relname = ANY(${tables}::text[]) AND c.relkind IN ('r', 'v', 'm', 'f', 'p')
        AND n.nspname NOT IN ('public', 'pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast%'
      ORDER BY 1, 2`) as { schema: string; naam: string }[];
    for (const e of elsewhere) out.push(`tabel ${e.schema}.${e.naam} naast public.${e.naam}`);
    return out;
  });
}
