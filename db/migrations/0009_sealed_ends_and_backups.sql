ALTER TABLE `backup_statuses` ADD `zegel` text;--> statement-breakpoint
ALTER TABLE `job_runs` ADD `eindzegel` text;