CREATE TABLE `audit_anchor_log` (
	`positie` integer PRIMARY KEY NOT NULL,
	`soort` text NOT NULL,
	`tenant_id` integer,
	`grootte` integer NOT NULL,
	`note` text NOT NULL,
	`bereik` text
);
--> statement-breakpoint
CREATE INDEX `audit_anchor_log_tenant_idx` ON `audit_anchor_log` (`tenant_id`,`soort`,`grootte`);