CREATE TABLE `audit_sleutels` (
	`tenant_id` integer NOT NULL,
	`sleutel` text NOT NULL,
	`inhoud` text NOT NULL,
	`seq` integer NOT NULL,
	`id` integer NOT NULL,
	`hash` text NOT NULL,
	PRIMARY KEY(`tenant_id`, `sleutel`),
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
) WITHOUT ROWID;
--> statement-breakpoint
CREATE INDEX `audit_sleutels_seq_idx` ON `audit_sleutels` (`tenant_id`,`seq`);