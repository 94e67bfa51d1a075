DROP INDEX `audit_entries_created_idx`;--> statement-breakpoint
DROP INDEX `login_attempts_tenant_tijdstip_idx`;