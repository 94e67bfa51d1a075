// What audit-verificatie checks of the database's schema besides the rows. Whoever can
// change the schema (anyone who writes the SQLite file; on PostgreSQL a role that owns
// nachtwacht's tables) could put something between nachtwacht and its tables: a trigger
// that rewrites an entry after it is stored (on PostgreSQL even with its hash recomputed,
// so the chain still links and audit-anker would sign it), a rule, a row security policy,
// or a view. nachtwacht's migrations create none of these but a few guard triggers on
// PostgreSQL; anything else is reported (docs/audit-chain.md, "The schema").
import type { Database } from "bun:sqlite";
import type { SQL } from "bun";

/** Every trigger, and every view, in the SQLite file: nachtwacht makes none. */
export function schemaAnomaliesSqlite(sqlite: Database): string[] {
  // Raw SQL: sqlite_schema is SQLite's own table, outside the Drizzle schema.
  const rows = sqlite.query("SELECT type, name, tbl_name AS tabel FROM sqlite_schema WHERE type IN ('trigger', 'view') ORDER BY type, name").all() as {
    type: "trigger" | "view";
    name: string;
    tabel: string;
  }[];
  return rows.map((r) => (r.type === "trigger" ? `trigger ${r.name} op ${r.tabel}` : `view ${r.name}`));
}

/** The triggers nachtwacht's PostgreSQL migrations create (0002, after 0003), as table.trigger. */
export const PG_OWN_TRIGGERS: ReadonlySet<string> = new Set([
  "audit_entries.audit_entries_have_tenant",
  "audit_entries.audit_entries_moved_have_tenant",
  "tenants.tenants_keep_their_audit",
  "tenants.tenants_keep_their_audit_truncate",
]);

/**
 * On PostgreSQL, in nachtwacht's schema (public): triggers other than PG_OWN_TRIGGERS,
 * rules, row security (policies or switched on), views; and a table or view named after
 * one of nachtwacht's tables in any other schema (not another session's temporary one).
 */
export async function schemaAnomaliesPg(sql: SQL, tables: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  const triggers = (await sql`
    SELECT c.relname AS tabel, t.tgname AS naam FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND NOT t.tgisinternal ORDER BY 1, 2`) as { tabel: string; naam: string }[];
  for (const t of triggers) if (!PG_OWN_TRIGGERS.has(`${t.tabel}.${t.naam}`)) out.push(`trigger ${t.naam} op ${t.tabel}`);
  const rules = (await sql`SELECT tablename AS tabel, rulename AS naam FROM pg_rules WHERE schemaname = 'public' ORDER BY 1, 2`) as { tabel: string; naam: string }[];
  for (const r of rules) out.push(`regel ${r.naam} op ${r.tabel}`);
  const secured = (await sql`
    SELECT c.relname AS tabel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND (c.relrowsecurity OR EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid)) ORDER BY 1`) as { tabel: string }[];
  for (const s of secured) out.push(`rijbeveiliging (row level security) op ${s.tabel}`);
  const views = (await sql`SELECT viewname AS naam FROM pg_views WHERE schemaname = 'public' ORDER BY 1`) as { naam: string }[];
  for (const v of views) out.push(`view ${v.naam}`);
  const elsewhere = (await sql`
    SELECT n.nspname AS schema, c.relname AS naam FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = ANY(${tables}::text[]) AND c.relkind IN ('r', 'v', 'm', 'f', 'p')
      AND n.nspname NOT IN ('public', 'pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast%'
    ORDER BY 1, 2`) as { schema: string; naam: string }[];
  for (const e of elsewhere) out.push(`tabel ${e.schema}.${e.naam} naast public.${e.naam}`);
  return out;
}
