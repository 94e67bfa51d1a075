CREATE TABLE "alarm_mails" (
	"about" text PRIMARY KEY NOT NULL,
	"state" text NOT NULL,
	"gemaild" text COLLATE "C" NOT NULL
);
