-- What the foreign keys of audit_entries and audit_sleutels (dropped in 0001) refused,
-- checked once per tenant row instead of once per appended entry: a tenant with audit
-- entries or keys is neither deleted nor renumbered (23503, as the keys answered). An
-- append holds its tenants' rows FOR KEY SHARE from its check that they exist until it
-- commits (src/pg/ingest.ts), so a DELETE waits for it and then sees its entries.
CREATE FUNCTION nachtwacht_tenant_keeps_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
    RETURN NEW;
  END IF;
  IF EXISTS (SELECT 1 FROM audit_entries WHERE tenant_id = OLD.id) OR EXISTS (SELECT 1 FROM audit_sleutels WHERE tenant_id = OLD.id) THEN
    RAISE EXCEPTION 'tenant % has audit entries: it is neither deleted nor renumbered', OLD.id USING ERRCODE = 'foreign_key_violation';
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER tenants_keep_their_audit BEFORE DELETE OR UPDATE OF id ON tenants FOR EACH ROW EXECUTE FUNCTION nachtwacht_tenant_keeps_audit();
