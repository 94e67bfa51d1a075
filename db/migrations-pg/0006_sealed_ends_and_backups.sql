ALTER TABLE "backup_statuses" ADD COLUMN "zegel" text;--> statement-breakpoint
ALTER TABLE "job_runs" ADD COLUMN "eindzegel" text;