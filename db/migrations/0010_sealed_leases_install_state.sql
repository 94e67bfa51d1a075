ALTER TABLE `audit_verification_state` ADD `zegel` text;--> statement-breakpoint
ALTER TABLE `job_leases` ADD `zegel` text;--> statement-breakpoint
ALTER TABLE `service_meta` ADD `zegel` text;