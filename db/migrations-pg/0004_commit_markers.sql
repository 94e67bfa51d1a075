CREATE TABLE "commit_markers" (
	"token" text PRIMARY KEY NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "commit_markers_at_idx" ON "commit_markers" USING btree ("at");