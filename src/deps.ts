import type { AlarmSink } from "./alarms/alarm.ts";
import type { Config } from "./config.ts";
import type { Store } from "./db.ts";
import type { PgStore } from "./pg/store.ts";
import type { Mailer } from "./mail/mailer.ts";
import type { WriteApiActivity } from "./ingest/activity.ts";

export type Clock = () => Date;

/** The database: the embedded SQLite file, or PostgreSQL when DATABASE_URL is set. */
export type AnyStore = Store | PgStore;

/**
 * Everything a job needs, passed in: the entry point wires the real ones, tests their
 * own. A job does its work by the store's kind; the rules it keeps live once, for both.
 */
export interface Deps<S extends AnyStore = AnyStore> {
  store: S;
  mailer: Mailer;
  alarms: AlarmSink;
  clock: Clock;
  config: Config;
  /**
   * Asks the WAL checkpointer's thread for a checkpoint now (src/checkpointer.ts), after a
   * large commit such as a retention batch; absent where no such thread runs (tests).
   */
  checkpointNow?: () => void;
  /**
   * Whether that thread failed and the service's connection checkpoints inside its own
   * commits again (Checkpointer.fallenBack), for /metrics; absent where no such thread runs.
   */
  walCheckpointerFallback?: () => boolean;
  /**
   * When the write API was last called in this process (src/ingest/activity.ts), for the
   * retention jobs' pacing on SQLite; wired by startServer, absent elsewhere (the jobs
   * then keep their usual batches).
   */
  writeApi?: WriteApiActivity;
  /**
   * How far this host's wall clock was stepped forward since the process started, in
   * milliseconds (src/time.ts wallClockStepMs, used when absent); the retention jobs
   * delete nothing after a large step (src/jobs/retention-clock.ts). Tests set their own.
   */
  clockStep?: () => number;
  /**
   * PostgreSQL: how far the database server's clock is ahead of this host's, in
   * milliseconds (src/pg/clock.ts databaseClockOffsetMs on the store, used when absent).
   * Tests set their own.
   */
  databaseClockOffset?: () => Promise<number>;
}

