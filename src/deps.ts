import type { AlarmSink } from "./alarms/alarm.ts";
import type { Config } from "./config.ts";
import type { Store } from "./db.ts";
import type { Mailer } from "./mail/mailer.ts";

export type Clock = () => Date;

/** Everything a job needs, passed in: the entry point wires the real ones, tests their own. */
export interface Deps {
  store: Store;
  mailer: Mailer;
  alarms: AlarmSink;
  clock: Clock;
  config: Config;
  /**
   * Asks the WAL checkpointer's thread for a checkpoint now (src/checkpointer.ts), after a
   * large commit such as a retention batch; absent where no such thread runs (tests).
   */
  checkpointNow?: () => void;
}
