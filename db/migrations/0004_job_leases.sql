CREATE TABLE `job_leases` (
	`job` text PRIMARY KEY NOT NULL,
	`pid` integer NOT NULL,
	`instantie` text NOT NULL,
	`host` text NOT NULL,
	`pid_ns` text,
	`run_id` integer NOT NULL,
	`verkregen` text NOT NULL,
	`vernieuwd` text NOT NULL,
	`verloopt` text NOT NULL
);
