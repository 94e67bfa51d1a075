-- The write API's idempotency keys move from audit_sleutels into their entries' rows
-- (db/schema.ts): written with the entry, one index more per append instead of a table
-- and two indexes, and deleted with it. Every key is carried over to the entry its
-- receipt names (tenant_id, seq, id and hash alike); a key whose receipt names no stored
-- entry could only answer a retry with a receipt for nothing, and is not carried over.
ALTER TABLE `audit_entries` ADD `sleutel` text;--> statement-breakpoint
ALTER TABLE `audit_entries` ADD `inhoud` text;--> statement-breakpoint
UPDATE `audit_entries` SET `sleutel` = k.`sleutel`, `inhoud` = k.`inhoud` FROM `audit_sleutels` AS k WHERE k.`tenant_id` = `audit_entries`.`tenant_id` AND k.`seq` = `audit_entries`.`seq` AND k.`id` = `audit_entries`.`id` AND k.`hash` = `audit_entries`.`hash`;--> statement-breakpoint
CREATE UNIQUE INDEX `audit_entries_sleutel_idx` ON `audit_entries` (`tenant_id`,`sleutel`) WHERE "audit_entries"."sleutel" IS NOT NULL;--> statement-breakpoint
DROP TABLE `audit_sleutels`;
