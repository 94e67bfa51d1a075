CREATE TABLE `audit_verification_state` (
	`tenant_id` integer PRIMARY KEY NOT NULL,
	`gecontroleerd` text NOT NULL,
	`intact` integer NOT NULL,
	`aantal_entries` integer NOT NULL,
	`fout_seq` integer,
	`fout_entry_id` integer,
	`fout_reden` text,
	FOREIGN KEY (`tenant_id`) REFERENCES `tenants`(`id`) ON UPDATE no action ON DELETE no action
);
