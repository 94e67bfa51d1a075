ALTER TABLE "audit_entries" DROP CONSTRAINT "audit_entries_tenant_id_tenants_id_fk";
--> statement-breakpoint
ALTER TABLE "audit_sleutels" DROP CONSTRAINT "audit_sleutels_tenant_id_tenants_id_fk";
