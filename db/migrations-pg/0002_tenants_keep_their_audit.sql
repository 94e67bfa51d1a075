-- What the foreign keys of audit_entries and audit_sleutels (dropped in 0001) refused,
-- checked once per statement instead of once per row:
-- - rows of audit_entries or audit_sleutels inserted or moved to a tenant that does not
--   exist (a statement trigger over the statement's new rows: one anti-join per INSERT);
-- - a tenant with audit entries or keys deleted, renumbered or truncated away. An append
--   holds its tenants' rows FOR KEY SHARE from its check that they exist until it commits
--   (src/pg/ingest.ts), so a DELETE waits for it and then sees its entries; a deleter in
--   a REPEATABLE READ or SERIALIZABLE snapshot would not see them, and is refused (40001).
-- Every name is schema-qualified and the functions' search_path fixed, so a session's
-- own tables (a temporary audit_entries) cannot stand in for nachtwacht's. 23503, as the
-- foreign keys answered.
CREATE FUNCTION public.nachtwacht_audit_rows_have_tenant() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  missing integer;
BEGIN
  SELECT n.tenant_id INTO missing FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM public.tenants t WHERE t.id = n.tenant_id) LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'tenant % does not exist: % is not written', missing, TG_TABLE_NAME USING ERRCODE = 'foreign_key_violation';
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER audit_entries_have_tenant AFTER INSERT ON public.audit_entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_audit_rows_have_tenant();
--> statement-breakpoint
CREATE TRIGGER audit_entries_moved_have_tenant AFTER UPDATE ON public.audit_entries REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_audit_rows_have_tenant();
--> statement-breakpoint
CREATE TRIGGER audit_sleutels_have_tenant AFTER INSERT ON public.audit_sleutels REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_audit_rows_have_tenant();
--> statement-breakpoint
CREATE TRIGGER audit_sleutels_moved_have_tenant AFTER UPDATE ON public.audit_sleutels REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_audit_rows_have_tenant();
--> statement-breakpoint
CREATE FUNCTION public.nachtwacht_tenant_keeps_audit() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    IF EXISTS (SELECT 1 FROM public.audit_entries) OR EXISTS (SELECT 1 FROM public.audit_sleutels) THEN
      RAISE EXCEPTION 'tenants has audit entries: it is not truncated' USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
    RETURN NEW;
  END IF;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'a tenant is deleted or renumbered at READ COMMITTED only (an append committed after this snapshot would not be seen)' USING ERRCODE = 'serialization_failure';
  END IF;
  IF EXISTS (SELECT 1 FROM public.audit_entries WHERE tenant_id = OLD.id) OR EXISTS (SELECT 1 FROM public.audit_sleutels WHERE tenant_id = OLD.id) THEN
    RAISE EXCEPTION 'tenant % has audit entries: it is neither deleted nor renumbered', OLD.id USING ERRCODE = 'foreign_key_violation';
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER tenants_keep_their_audit BEFORE DELETE OR UPDATE OF id ON public.tenants FOR EACH ROW EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit();
--> statement-breakpoint
CREATE TRIGGER tenants_keep_their_audit_truncate BEFORE TRUNCATE ON public.tenants FOR EACH STATEMENT EXECUTE FUNCTION public.nachtwacht_tenant_keeps_audit();
