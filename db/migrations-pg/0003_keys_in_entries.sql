-- The write API's idempotency keys move from audit_sleutels into their entries' rows
-- (db/schema-pg.ts), as on SQLite (db/migrations/0007_keys_in_entries.sql): every key to
-- the entry its receipt names (tenant_id, seq, id and hash alike). The UPDATE changes no tenant_id,
-- so 0002's check of moved rows is off for it: it would hold every updated row in a
-- transition table for nothing.
ALTER TABLE "audit_entries" ADD COLUMN "sleutel" text;--> statement-breakpoint
ALTER TABLE "audit_entries" ADD COLUMN "inhoud" text;--> statement-breakpoint
ALTER TABLE public.audit_entries DISABLE TRIGGER audit_entries_moved_have_tenant;--> statement-breakpoint
UPDATE public.audit_entries AS e SET sleutel = k.sleutel, inhoud = k.inhoud FROM public.audit_sleutels AS k WHERE k.tenant_id = e.tenant_id AND k.seq = e.seq AND k.id = e.id AND k.hash = e.hash;--> statement-breakpoint
ALTER TABLE public.audit_entries ENABLE TRIGGER audit_entries_moved_have_tenant;--> statement-breakpoint
CREATE UNIQUE INDEX "audit_entries_sleutel_idx" ON "audit_entries" USING btree ("tenant_id","sleutel") WHERE "audit_entries"."sleutel" IS NOT NULL;--> statement-breakpoint
DROP TABLE public.audit_sleutels;--> statement-breakpoint
-- 0002's guard on tenants, now without audit_sleutels (its own triggers went with it).
CREATE OR REPLACE FUNCTION public.nachtwacht_tenant_keeps_audit() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    IF EXISTS (SELECT 1 FROM public.audit_entries) THEN
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
  IF EXISTS (SELECT 1 FROM public.audit_entries WHERE tenant_id = OLD.id) THEN
    RAISE EXCEPTION 'tenant % has audit entries: it is neither deleted nor renumbered', OLD.id USING ERRCODE = 'foreign_key_violation';
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
$$;
