CREATE TABLE `administrators` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`tenant_id` integer NOT NULL,
	`naam` text NOT NULL,
	`email` text NOT NULL,
	`actief` integer DEFAULT true NOT NULL,
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `administrators_tenant_idx` ON `administrators` (`tenant_id`);--> statement-breakpoint
CREATE TABLE `audit_entries` (
	`tenant_id` integer NOT NULL,
	`seq` integer NOT NULL,
	`id` integer NOT NULL,
	`created_at` text NOT NULL,
	`actor` text NOT NULL,
	`action` text NOT NULL,
	`subject` text NOT NULL,
	`details` text NOT NULL,
	`prev_hash` text NOT NULL,
	`hash` text NOT NULL,
	PRIMARY KEY(`tenant_id`, `seq`),
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
) WITHOUT ROWID;
--> statement-breakpoint
CREATE UNIQUE INDEX `audit_entries_id_idx` ON `audit_entries` (`id`);--> statement-breakpoint
CREATE INDEX `audit_entries_created_idx` ON `audit_entries` (`created_at`);--> statement-breakpoint
CREATE INDEX `audit_entries_tenant_created_idx` ON `audit_entries` (`tenant_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `audit_head_anchors` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`tenant_id` integer NOT NULL,
	`seq` integer NOT NULL,
	`hash` text NOT NULL,
	`tijdstip` text NOT NULL,
	`handtekening` text,
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `audit_head_anchors_tenant_seq_idx` ON `audit_head_anchors` (`tenant_id`,`seq`);--> statement-breakpoint
CREATE TABLE `audit_retention_anchors` (
	`tenant_id` integer PRIMARY KEY NOT NULL,
	`seq` integer NOT NULL,
	`hash` text NOT NULL,
	`bijgewerkt` text NOT NULL,
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `backup_statuses` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`ontvangen` text NOT NULL,
	`exit_code` integer NOT NULL,
	`gelukt` integer NOT NULL,
	`bestandsnaam` text,
	`grootte` integer,
	`foutmelding` text,
	`bron` text NOT NULL
);
--> statement-breakpoint
CREATE INDEX `backup_statuses_ontvangen_idx` ON `backup_statuses` (`ontvangen`);--> statement-breakpoint
CREATE TABLE `job_runs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`job` text NOT NULL,
	`gestart` text NOT NULL,
	`beeindigd` text,
	`uitkomst` text NOT NULL,
	`http_status` integer,
	`samenvatting` text,
	`fout` text
);
--> statement-breakpoint
CREATE INDEX `job_runs_job_gestart_idx` ON `job_runs` (`job`,`gestart`);--> statement-breakpoint
CREATE TABLE `login_attempts` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`tijdstip` text NOT NULL,
	`account` text NOT NULL,
	`ip` text NOT NULL,
	`gelukt` integer NOT NULL,
	`reden` text,
	`tenant_id` integer,
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `login_attempts_tijdstip_idx` ON `login_attempts` (`tijdstip`);--> statement-breakpoint
CREATE INDEX `login_attempts_tenant_tijdstip_idx` ON `login_attempts` (`tenant_id`,`tijdstip`);--> statement-breakpoint
CREATE INDEX `login_attempts_failed_idx` ON `login_attempts` (`tijdstip`,`ip`,`account`) WHERE gelukt = 0;--> statement-breakpoint
CREATE TABLE `service_meta` (
	`key` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `tenants` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`naam` text NOT NULL,
	`actief` integer DEFAULT true NOT NULL,
	`aangemaakt` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `weekly_report_deliveries` (
	`administrator_id` integer NOT NULL,
	`tenant_id` integer NOT NULL,
	`iso_week` text NOT NULL,
	`verstuurd` text NOT NULL,
	PRIMARY KEY(`administrator_id`, `tenant_id`, `iso_week`),
	FOREIGN KEY (`administrator_id`) REFERENCES `administrators`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
);
