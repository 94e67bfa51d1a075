// Whether the host application writes through the write API in this process. Its
// writes wait on the event loop for the whole of any synchronous SQLite batch a job runs
// meanwhile (a writer in another process waits for the write lock instead, and gets in
// at the gap after each batch), so the retention jobs keep their batches shorter while it
// does (src/audit/retention.ts, Pacing.whileAppWrites; docs/performance.md, round 12).

/** How long after a write-API call the application counts as writing. */
export const APP_WRITING_MS = 60_000;

export class WriteApiActivity {
  private lastAt = -Infinity;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A write-API call arrived (past the gate). */
  seen(): void {
    this.lastAt = this.now();
  }

  /** Whether one arrived in the last `withinMs`. */
  recent(withinMs = APP_WRITING_MS): boolean {
    return this.now() - this.lastAt <= withinMs;
  }
}
