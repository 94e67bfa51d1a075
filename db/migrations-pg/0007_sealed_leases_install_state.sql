ALTER TABLE "audit_verification_state" ADD COLUMN "zegel" text;--> statement-breakpoint
ALTER TABLE "job_leases" ADD COLUMN "zegel" text;--> statement-breakpoint
ALTER TABLE "service_meta" ADD COLUMN "zegel" text;