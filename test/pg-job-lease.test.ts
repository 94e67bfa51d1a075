// The job lease on PostgreSQL (src/pg/job-lease.ts) against a real server (test/pg.ts):
// the same results as on SQLite (test/job-lease.test.ts, "the lease functions on one
// database") — refused while another holder's lease is valid, with nothing written;
// renewed and released only by its holder and run; taken over once expired or once its
// holder's pid is gone from this host — and two REAL processes taking the same job's
// lease as fast as they can never hold it at the same time.
import { afterEach, describe, expect, setDefaultTimeout, spyOn, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { HERE, holderGone, newLeaseHolder, startRenewing, type LeaseHolder } from "../src/job-lease.ts";
import { liveLeasesPg, releaseLeasePg, renewLeasePg, startLeasedRunPg } from "../src/pg/job-lease.ts";
import { writeKeptEnds } from "../src/job-runs.ts";
import { finishRunPg } from "../src/pg/job-runs.ts";
import { RunningJobs } from "../src/running-jobs.ts";
import { LOCK_TIMEOUT_MS, openPgStore, type PgStore } from "../src/pg/store.ts";
import { spawnFixture, type FixtureProcess } from "./binary.ts";
import { useTestCluster } from "./pg.ts";
import { startPgProxy } from "./pg-proxy.ts";
import { TEST_SEAL, until } from "./helpers.ts";
import { driverError } from "../src/http/errors.ts";

setDefaultTimeout(120_000);

const NOW = new Date("2026-07-23T12:00:00.000Z");
const at = (ms: number) => new Date(NOW.getTime() + ms);
/** A live holder on another host: never provably gone, so only its expiry frees the job. */
const elsewhere = (): LeaseHolder => ({ ...newLeaseHolder(), host: "elders.example" });

const cluster = useTestCluster();
const stores: PgStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

async function freshStore(): Promise<PgStore> {
  const store = await openPgStore(await cluster.createDatabase());
  stores.push(store);
  return store;
}

const runsOf = async (store: PgStore, job: string) =>
  (await store.sql`SELECT id, uitkomst, beeindigd FROM job_runs WHERE job = ${job} ORDER BY id`) as { id: number; uitkomst: string; beeindigd: string | null }[];
const leaseRows = async (store: PgStore) => (await store.sql`SELECT job, pid, instantie, run_id, verloopt FROM job_leases ORDER BY job`) as Record<string, unknown>[];

describe("the lease functions on PostgreSQL", () => {
  test("a take whose COMMIT's answer is lost (the connection cut after the server committed): the take is found committed and runs here; the other instance, told it runs here, is right; so are the run's end and the release", async () => {
    const url = await cluster.createDatabase();
    const direct = await openPgStore(url);
    stores.push(direct);
    const proxy = await startPgProxy(url);
    try {
      const viaProxy = await openPgStore(proxy.url);
      stores.push(viaProxy);
      const firedAt = at(-1000);
      const a = elsewhere();
      const cut = proxy.cutNextCommit("after");
      const take = await startLeasedRunPg(viaProxy, TEST_SEAL, "dagrapport", a, NOW, 90_000, firedAt);
      await cut;
      expect(take).toMatchObject({ ok: true });
      if (!take.ok) return;
      expect(await runsOf(direct, "dagrapport")).toEqual([{ id: take.runId, uitkomst: "bezig", beeindigd: null }]);
      const b = await startLeasedRunPg(direct, TEST_SEAL, "dagrapport", elsewhere(), at(500), 90_000, firedAt);
      expect(b).toMatchObject({ ok: false });

      // The run's end and the lease's release, their answers lost the same way: found stored, not reported failed.
      const ended = proxy.cutNextCommit("after");
      await finishRunPg(viaProxy, TEST_SEAL, { runId: take.runId, job: "dagrapport", gestart: NOW.toISOString() }, at(1000), { uitkomst: "ok", httpStatus: 200 });
      await ended;
      expect(await runsOf(direct, "dagrapport")).toEqual([{ id: take.runId, uitkomst: "ok", beeindigd: at(1000).toISOString() }]);
      const released = proxy.cutNextCommit("after");
      expect(await releaseLeasePg(viaProxy, "dagrapport", a, take.runId)).toBe(true);
      await released;
      expect(await leaseRows(direct)).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  test("the renewer on PostgreSQL: a renewal that fails past the expiry is logged as the lapse it is (state.lapsed), and renewal goes on until one gets through", async () => {
    const store = await freshStore();
    const lines: string[] = [];
    const spy = spyOn(process.stderr, "write").mockImplementation(((chunk: unknown) => {
      lines.push(String(chunk));
      return true;
    }) as typeof process.stderr.write);
    try {
      const h = newLeaseHolder();
      const r = await startLeasedRunPg(store, TEST_SEAL, "audit-anker", h, NOW, 60);
      if (!r.ok) throw new Error("not taken");
      // Every renewal fails (a constraint the UPDATE breaks) while the clock is past the expiry.
      await store.sql`ALTER TABLE job_leases ADD CONSTRAINT nooit CHECK (verloopt < '2000') NOT VALID`;
      let now = NOW.getTime() + 1000;
      const renewer = startRenewing(store, TEST_SEAL, () => new Date(now), "audit-anker", h, r.runId, { renewMs: 10, ttlMs: 60 }, r.verloopt);
      await until("the lapse to be logged", () => lines.some((l) => l.includes("a running job's lease expired without a renewal (the renewal failed")));
      await store.sql`ALTER TABLE job_leases DROP CONSTRAINT nooit`;
      const verloopt = async () => ((await store.sql`SELECT verloopt FROM job_leases WHERE job = 'audit-anker'`) as { verloopt: string }[])[0]!.verloopt;
      await until("a renewal once it can", async () => (await verloopt()) === new Date(now + 60).toISOString());
      now += 1000;
      const state = await renewer.stop();
      expect(state).toMatchObject({ lost: false, lapsed: true });
    } finally {
      spy.mockRestore();
    }
  });

  test("a kept end is written by the next job call's one try without waiting (writeKeptEnds with 0), and forgotten", async () => {
    const store = await freshStore();
    const h = newLeaseHolder();
    const r = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", h, NOW, 90_000);
    if (!r.ok) throw new Error("not taken");
    const running = new RunningJobs();
    running.keepEnd({ job: "dagrapport", runId: r.runId, gestart: NOW.toISOString(), end: at(1000), result: { uitkomst: "ok", httpStatus: 200 } });
    const written = await writeKeptEnds(store, TEST_SEAL, running, 0);
    expect(written.map((k) => k.runId)).toEqual([r.runId]);
    expect(running.keptEndsList()).toEqual([]);
    expect(await runsOf(store, "dagrapport")).toEqual([{ id: r.runId, uitkomst: "ok", beeindigd: at(1000).toISOString() }]);
  });

  test("a release waits for the lease's row as long as its caller waits: a short wait gives up (55P03) and the lease stays; a longer one gets through once the row is free", async () => {
    const store = await freshStore();
    const h = newLeaseHolder();
    const r = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", h, NOW, 90_000);
    if (!r.ok) throw new Error("not taken");
    const other = await store.sql.reserve();
    await other`BEGIN`;
    await other`SELECT job FROM job_leases WHERE job = 'dagrapport' FOR UPDATE`;
    const t0 = performance.now();
    const short = await releaseLeasePg(store, "dagrapport", h, r.runId, 50).then(() => null, (e: unknown) => e);
    expect(driverError(short)?.errno).toBe("55P03");
    // Its own wait, not the pool's lock_timeout (5 s).
    expect(performance.now() - t0).toBeLessThan(LOCK_TIMEOUT_MS);
    expect((await leaseRows(store)).length).toBe(1);
    // Longer than the pool's 5 s lock_timeout would allow: after the answer a release waits up to a minute.
    const long = releaseLeasePg(store, "dagrapport", h, r.runId, 60_000);
    await until("the release to wait for the row", async () => Number(((await store.sql`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`) as { n: string }[])[0]!.n) === 1);
    await other`COMMIT`;
    other.release();
    expect(await long).toBe(true);
    expect(await leaseRows(store)).toEqual([]);
  });

  test("late writes never move things back: the first end written of a run stays (a second, given-up write arriving later is a no-op), and a renewal older than the last one leaves the expiry", async () => {
    const store = await freshStore();
    const h = newLeaseHolder();
    const r = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", h, NOW, 90_000);
    if (!r.ok) throw new Error("not taken");
    await finishRunPg(store, TEST_SEAL, { runId: r.runId, job: "dagrapport", gestart: NOW.toISOString() }, at(1000), { uitkomst: "ok", httpStatus: 200, samenvatting: { volledig: true } });
    await finishRunPg(store, TEST_SEAL, { runId: r.runId, job: "dagrapport", gestart: NOW.toISOString() }, at(2000), { uitkomst: "ok", httpStatus: 200, fout: "zonder samenvatting" });
    const [run] = (await store.sql`SELECT beeindigd, samenvatting, fout FROM job_runs WHERE id = ${r.runId}`) as { beeindigd: string; samenvatting: string; fout: string | null }[];
    expect(run).toEqual({ beeindigd: at(1000).toISOString(), samenvatting: JSON.stringify({ volledig: true }), fout: null });
    expect(await renewLeasePg(store, TEST_SEAL, "dagrapport", h, r.runId, at(60_000), 90_000)).toBe(true);
    expect(await renewLeasePg(store, TEST_SEAL, "dagrapport", h, r.runId, at(30_000), 90_000)).toBe(true);
    expect((await leaseRows(store))[0]!.verloopt).toBe(at(150_000).toISOString());
  });

  test("a scheduled take (firedAt) is refused once a run that started at or after that time ended ok or afwijking, with nothing written; by hand, or when only a failed run started since, it is taken", async () => {
    const store = await freshStore();
    const firedAt = new Date(NOW.getTime() - 60_000);
    const a = newLeaseHolder();
    const first = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", a, NOW, 90_000, firedAt);
    if (!first.ok) throw new Error("not taken");
    await finishRunPg(store, TEST_SEAL, { runId: first.runId, job: "dagrapport", gestart: NOW.toISOString() }, at(1000), { uitkomst: "ok", httpStatus: 200 });
    await releaseLeasePg(store, "dagrapport", a, first.runId);
    const done = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", elsewhere(), at(2000), 90_000, firedAt);
    expect(done).toEqual({ ok: false, gedaan: { runId: first.runId, gestart: NOW.toISOString(), uitkomst: "ok" } });
    expect((await runsOf(store, "dagrapport")).length).toBe(1);
    // Without firedAt (by hand) it runs; for a later scheduled time too.
    const byHand = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", a, at(3000), 90_000);
    if (!byHand.ok) throw new Error("not taken by hand");
    await finishRunPg(store, TEST_SEAL, { runId: byHand.runId, job: "dagrapport", gestart: at(3000).toISOString() }, at(4000), { uitkomst: "fout", httpStatus: 500, fout: "x" });
    await releaseLeasePg(store, "dagrapport", a, byHand.runId);
    const later = at(2500);
    // Only a failed run started at or after `later`: the scheduled take goes ahead.
    expect((await startLeasedRunPg(store, TEST_SEAL, "dagrapport", a, at(5000), 90_000, later)).ok).toBe(true);
  });

  test("taken with its run; a second holder is refused and writes nothing; renewal moves the expiry; only the holder of the run renews or releases; released, the next holder takes it", async () => {
    const store = await freshStore();
    const a = elsewhere();
    const b = newLeaseHolder();

    const first = await startLeasedRunPg(store, TEST_SEAL, "weekrapport", a, NOW, 90_000);
    if (!first.ok) throw new Error("not taken");
    expect(first).toEqual({ ok: true, runId: first.runId, verloopt: at(90_000), overgenomen: null });
    expect(await runsOf(store, "weekrapport")).toEqual([{ id: first.runId, uitkomst: "bezig", beeindigd: null }]);

    const refused = await startLeasedRunPg(store, TEST_SEAL, "weekrapport", b, at(89_999), 90_000);
    expect(refused.ok).toBe(false);
    expect(!refused.ok && refused.houder).toEqual({
      job: "weekrapport",
      pid: a.pid,
      instantie: a.instantie,
      host: "elders.example",
      pidNs: a.pidNs,
      runId: first.runId,
      verkregen: NOW.toISOString(),
      vernieuwd: NOW.toISOString(),
      verloopt: at(90_000).toISOString(),
      zegel: TEST_SEAL.sealLease({ job: "weekrapport", ...a, runId: first.runId, verloopt: at(90_000).toISOString() }),
    });
    // Nothing was written for the refused call: no run, the lease as it was.
    expect(await runsOf(store, "weekrapport")).toEqual([{ id: first.runId, uitkomst: "bezig", beeindigd: null }]);
    expect(await leaseRows(store)).toEqual([{ job: "weekrapport", pid: a.pid, instantie: a.instantie, run_id: first.runId, verloopt: at(90_000).toISOString() }]);

    // Another holder (even with the same pid: another instance in this process) neither renews nor releases it.
    const sibling = newLeaseHolder();
    expect(sibling.pid).toBe(b.pid);
    expect(await renewLeasePg(store, TEST_SEAL, "weekrapport", b, first.runId, at(30_000), 90_000)).toBe(false);
    expect(await releaseLeasePg(store, "weekrapport", b, first.runId)).toBe(false);
    expect(await renewLeasePg(store, TEST_SEAL, "weekrapport", { ...a, instantie: sibling.instantie }, first.runId, at(30_000), 90_000)).toBe(false);
    // The holder itself, naming another run, neither.
    expect(await renewLeasePg(store, TEST_SEAL, "weekrapport", a, first.runId + 1, at(30_000), 90_000)).toBe(false);
    expect(await releaseLeasePg(store, "weekrapport", a, first.runId + 1)).toBe(false);
    expect((await leaseRows(store))[0]!.verloopt).toBe(at(90_000).toISOString());

    // Renewed at +30 s, it holds until +120 s: past the first expiry b is still refused.
    expect(await renewLeasePg(store, TEST_SEAL, "weekrapport", a, first.runId, at(30_000), 90_000)).toBe(true);
    expect((await leaseRows(store))[0]!.verloopt).toBe(at(120_000).toISOString());
    const stillRefused = await startLeasedRunPg(store, TEST_SEAL, "weekrapport", b, at(100_000), 90_000);
    expect(!stillRefused.ok && stillRefused.houder).toMatchObject({ instantie: a.instantie, vernieuwd: at(30_000).toISOString(), verloopt: at(120_000).toISOString() });
    expect((await liveLeasesPg(store.db, at(119_999), TEST_SEAL)).get("weekrapport")).toMatchObject({ instantie: a.instantie, runId: first.runId });

    expect(await releaseLeasePg(store, "weekrapport", a, first.runId)).toBe(true);
    expect(await releaseLeasePg(store, "weekrapport", a, first.runId)).toBe(false);
    expect(await leaseRows(store)).toEqual([]);

    const second = await startLeasedRunPg(store, TEST_SEAL, "weekrapport", b, at(100_000), 90_000);
    if (!second.ok) throw new Error("not taken after the release");
    expect(second.overgenomen).toBeNull();
    expect(second.runId).toBeGreaterThan(first.runId);
    expect((await runsOf(store, "weekrapport")).map((r) => r.id)).toEqual([first.runId, second.runId]);
    // The first holder's older run is not its lease any more.
    expect(await renewLeasePg(store, TEST_SEAL, "weekrapport", a, first.runId, at(100_000), 90_000)).toBe(false);

    // A holder that takes the job again (its release failed) replaces its own lease; an older run's it cannot renew or release.
    const again = await startLeasedRunPg(store, TEST_SEAL, "weekrapport", b, at(110_000), 90_000);
    if (!again.ok) throw new Error("its own lease refused");
    expect(again.overgenomen).toBeNull();
    expect(await renewLeasePg(store, TEST_SEAL, "weekrapport", b, second.runId, at(120_000), 90_000)).toBe(false);
    expect(await releaseLeasePg(store, "weekrapport", b, second.runId)).toBe(false);
    expect(await releaseLeasePg(store, "weekrapport", b, again.runId)).toBe(true);
  });

  test("once its expiry has passed another holder takes it over ('verlopen'); the former holder's renewal then fails", async () => {
    const store = await freshStore();
    const a = elsewhere();
    const first = await startLeasedRunPg(store, TEST_SEAL, "audit-anker", a, NOW, 90_000);
    if (!first.ok) throw new Error("not taken");
    expect((await startLeasedRunPg(store, TEST_SEAL, "audit-anker", newLeaseHolder(), at(89_999), 90_000)).ok).toBe(false);

    const b = newLeaseHolder();
    const taken = await startLeasedRunPg(store, TEST_SEAL, "audit-anker", b, at(90_000), 90_000);
    if (!taken.ok) throw new Error("expired lease not taken over");
    expect(taken.overgenomen).toEqual({
      job: "audit-anker",
      pid: a.pid,
      instantie: a.instantie,
      host: "elders.example",
      pidNs: a.pidNs,
      runId: first.runId,
      verkregen: NOW.toISOString(),
      vernieuwd: NOW.toISOString(),
      verloopt: at(90_000).toISOString(),
      zegel: TEST_SEAL.sealLease({ job: "audit-anker", ...a, runId: first.runId, verloopt: at(90_000).toISOString() }),
      reden: "verlopen",
    });
    expect(await leaseRows(store)).toEqual([{ job: "audit-anker", pid: b.pid, instantie: b.instantie, run_id: taken.runId, verloopt: at(180_000).toISOString() }]);
    expect((await runsOf(store, "audit-anker")).map((r) => r.id)).toEqual([first.runId, taken.runId]);
    expect(await renewLeasePg(store, TEST_SEAL, "audit-anker", a, first.runId, at(90_000), 90_000)).toBe(false);
    expect(await releaseLeasePg(store, "audit-anker", a, first.runId)).toBe(false);
  });

  test("a lease whose holder's pid is gone from this host (same PID namespace) is taken over at once ('proces-weg'); the same pid on another host is not", async () => {
    const store = await freshStore();
    const child = Bun.spawn(["true"]);
    await child.exited;
    const here = { pid: child.pid, instantie: randomUUID(), ...HERE };
    expect(holderGone(here)).toBe(true);

    const left = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", here, NOW, 90_000);
    if (!left.ok) throw new Error("not taken");
    expect(await leaseRows(store)).toEqual([{ job: "dagrapport", pid: child.pid, instantie: here.instantie, run_id: left.runId, verloopt: at(90_000).toISOString() }]);
    const taken = await startLeasedRunPg(store, TEST_SEAL, "dagrapport", newLeaseHolder(), at(1), 90_000);
    if (!taken.ok) throw new Error("the gone holder's lease was not taken over");
    expect(taken.overgenomen).toMatchObject({ pid: child.pid, instantie: here.instantie, runId: left.runId, verloopt: at(90_000).toISOString(), reden: "proces-weg" });

    const far = { ...here, instantie: randomUUID(), host: "elders.example" };
    expect(holderGone(far)).toBe(false);
    // Another host of the same name, in its root PID namespace (the same inode on every
    // Linux host): only its boot id tells it apart. A pid that is not here says nothing.
    expect(HERE.pidNs).toMatch(/^pid:\[\d+\] boot:[0-9a-f-]{36}$/);
    const twin = { ...here, instantie: randomUUID(), pidNs: HERE.pidNs!.replace(/boot:.*/, `boot:${randomUUID()}`) };
    expect(holderGone(twin)).toBe(false);
    expect((await startLeasedRunPg(store, TEST_SEAL, "audit-anker", twin, NOW, 90_000)).ok).toBe(true);
    const notTaken = await startLeasedRunPg(store, TEST_SEAL, "audit-anker", newLeaseHolder(), at(1), 90_000);
    expect(!notTaken.ok && notTaken.houder).toMatchObject({ pid: child.pid, instantie: twin.instantie });
    expect((await startLeasedRunPg(store, TEST_SEAL, "weekrapport", far, NOW, 90_000)).ok).toBe(true);
    const refused = await startLeasedRunPg(store, TEST_SEAL, "weekrapport", newLeaseHolder(), at(1), 90_000);
    expect(!refused.ok && refused.houder).toMatchObject({ pid: child.pid, host: "elders.example" });
  });

  test("liveLeasesPg leaves out expired leases and those whose holder is provably gone", async () => {
    const store = await freshStore();
    const child = Bun.spawn(["true"]);
    await child.exited;
    const gone = { pid: child.pid, instantie: randomUUID(), ...HERE };
    const live = elsewhere();
    const mine = newLeaseHolder();
    expect((await startLeasedRunPg(store, TEST_SEAL, "weekrapport", live, NOW, 90_000)).ok).toBe(true);
    expect((await startLeasedRunPg(store, TEST_SEAL, "dagrapport", gone, NOW, 90_000)).ok).toBe(true);
    expect((await startLeasedRunPg(store, TEST_SEAL, "audit-anker", elsewhere(), NOW, 10_000)).ok).toBe(true);
    expect((await startLeasedRunPg(store, TEST_SEAL, "backup-controle", mine, NOW, 90_000)).ok).toBe(true);
    expect((await leaseRows(store)).length).toBe(4);

    const atTen = await liveLeasesPg(store.db, at(10_000), TEST_SEAL);
    expect([...atTen.keys()].sort()).toEqual(["backup-controle", "weekrapport"]);
    expect(atTen.get("weekrapport")).toMatchObject({ pid: live.pid, instantie: live.instantie, host: "elders.example" });
    expect(atTen.get("backup-controle")).toMatchObject({ pid: process.pid, instantie: mine.instantie });
    expect([...(await liveLeasesPg(store.db, at(9_999), TEST_SEAL)).keys()].sort()).toEqual(["audit-anker", "backup-controle", "weekrapport"]);
    expect((await liveLeasesPg(store.db, at(90_000), TEST_SEAL)).size).toBe(0);
  });
});

// ---------------------------------------------------------------- hosts whose clocks disagree

/** A real process on a "host" whose wall clock runs `skewMs` from this one's (test/fixtures/skewed-clock.ts), taking `job`'s lease. */
async function skewedTaker(url: string, job: string, skewMs: number) {
  const p = spawnFixture("pg-lease-skewed.ts", { LEASE_PG_URL: url, LEASE_JOB: job, NACHTWACHT_TEST_CLOCK_SKEW_MS: String(skewMs) }, { preload: "skewed-clock.ts", stdin: "pipe" });
  await until("the skewed process to report", () => {
    if (p.proc.exitCode !== null) throw new Error(`it exited early (${p.proc.exitCode}): ${p.stderr()}`);
    return p.stdout().includes("\n");
  });
  const told = JSON.parse(p.stdout()) as { klok: string; genomen: boolean; overgenomen?: string | null; houderPid?: number; vernieuwd: boolean | null; levend: { pid: number } | null };
  const end = async () => {
    (p.proc.stdin as import("bun").FileSink).end();
    expect({ code: await p.proc.exited, stderr: p.stderr() }).toEqual({ code: 0, stderr: "" });
  };
  return { told, pid: p.proc.pid, end };
}

describe("hosts whose clocks disagree, on one PostgreSQL server", () => {
  test("leases run on the server's clock: a process 2 min ahead finds another's live lease live and is refused; one 2 min behind writes (and renews) an expiry a full term ahead on the server's clock, so a correct host is refused a minute later", async () => {
    const url = await cluster.createDatabase();
    const store = await freshStore();
    const serverMs = async () => Number(((await store.sql`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`) as { ms: number }[])[0]!.ms);

    // Ahead: the lease this process took a moment ago has 90 s left, not -30.
    const other = await openPgStore(url);
    stores.push(other);
    const a = elsewhere();
    expect((await startLeasedRunPg(other, TEST_SEAL, "dagrapport", a, new Date(), 90_000)).ok).toBe(true);
    const ahead = await skewedTaker(url, "dagrapport", 120_000);
    expect(Date.parse(ahead.told.klok) - Date.now()).toBeGreaterThan(100_000);
    expect(ahead.told).toMatchObject({ genomen: false, houderPid: a.pid, vernieuwd: null, levend: { pid: a.pid } });
    await ahead.end();
    expect((await leaseRows(other)).map((r) => [r.job, r.instantie])).toEqual([["dagrapport", a.instantie]]);

    // Behind: its lease (taken and renewed) lasts 90 s from the server's now, not from its own.
    const before = await serverMs();
    const behind = await skewedTaker(url, "audit-anker", -120_000);
    const after = await serverMs();
    expect(behind.told).toMatchObject({ genomen: true, overgenomen: null, vernieuwd: true, levend: { pid: behind.pid } });
    const [row] = (await leaseRows(other)).filter((r) => r.job === "audit-anker");
    const expiry = Date.parse(row!.verloopt as string);
    expect(expiry).toBeGreaterThanOrEqual(before + 90_000 - 1_000);
    expect(expiry).toBeLessThanOrEqual(after + 90_000 + 1_000);
    // A host with the right clock, a minute on: still the skewed process's (alive, on this host).
    const refused = await startLeasedRunPg(other, TEST_SEAL, "audit-anker", newLeaseHolder(), new Date(Date.now() + 60_000), 90_000);
    expect(!refused.ok && refused.houder?.pid).toBe(behind.pid);
    await behind.end();
    expect((await leaseRows(other)).map((r) => r.job)).toEqual(["dagrapport"]);
  });
});

// ---------------------------------------------------------------- two real processes

function startContender(url: string, label: string, wins: number, barrier: number): FixtureProcess {
  return spawnFixture("pg-lease-contender.ts", { LEASE_PG_URL: url, LEASE_LABEL: label, LEASE_WINS: String(wins), LEASE_BARRIER: String(barrier) });
}


describe("two processes taking the same job's lease on one PostgreSQL database", () => {
  test("never hold it at the same time: every run's begin and end lie between no other run's, its lease row names it throughout, every release finds it; the wins are the job_runs rows", async () => {
    const WINS = 150;
    const BARRIER = 0x74657374; // a key of this test's own, outside nachtwacht's (src/pg/store.ts)
    const url = await cluster.createDatabase();
    const store = await openPgStore(url);
    stores.push(store);
    await store.sql`CREATE TABLE lease_log (seq bigserial PRIMARY KEY, proc text NOT NULL, run_id integer NOT NULL, event text NOT NULL, lease_run integer)`;

    // Both processes start contending at the same moment: each waits for this lock after printing "ready".
    const gate = await store.sql.reserve();
    let contenders: FixtureProcess[] = [];
    try {
      await gate`SELECT pg_advisory_lock(${BARRIER}::bigint)`;
      contenders = ["a", "b"].map((label) => startContender(url, label, WINS, BARRIER));
      await until("both contenders to be ready", () => {
        for (const c of contenders) if (c.proc.exitCode !== null) throw new Error(`a contender exited early (${c.proc.exitCode}): ${c.stderr()}`);
        return contenders.every((c) => c.stdout().startsWith("ready\n"));
      });
    } finally {
      await gate`SELECT pg_advisory_unlock(${BARRIER}::bigint)`;
      gate.release();
    }
    const codes = await Promise.all(contenders.map((c) => c.proc.exited));
    expect({ codes, stderr: contenders.map((c) => c.stderr()) }).toEqual({ codes: [0, 0], stderr: ["", ""] });
    const results = contenders.map((c) => JSON.parse(c.stdout().trim().split("\n").at(-1)!) as { label: string; wins: number; refused: number; lost: number });

    // Walk the log in its sequence order. Under a correct lease a run's end is logged
    // before its release commits, and the next run's begin only after its take
    // committed, so the log reads begin/end of one run at a time, each line seeing its
    // own run in the lease row.
    const log = (await store.sql`SELECT proc, run_id, event, lease_run FROM lease_log ORDER BY seq`) as { proc: string; run_id: number; event: string; lease_run: number | null }[];
    const violations: string[] = [];
    let holding: number | null = null;
    for (const l of log) {
      if (l.lease_run !== l.run_id) violations.push(`${l.proc}: run ${l.run_id} at its ${l.event} found the lease naming run ${l.lease_run}`);
      if (l.event === "begin") {
        if (holding !== null) violations.push(`${l.proc}: run ${l.run_id} began while run ${holding} had not ended`);
        holding = l.run_id;
      } else {
        if (holding !== l.run_id) violations.push(`${l.proc}: run ${l.run_id} ended while the log held run ${holding}`);
        holding = null;
      }
    }
    expect(violations.slice(0, 10)).toEqual([]);
    // Every release found its own lease still there: no one had taken it over.
    expect(results.map((r) => [r.label, r.wins, r.lost])).toEqual([
      ["a", WINS, 0],
      ["b", WINS, 0],
    ]);
    // They did contend: some attempts met the other's lease.
    expect(results[0]!.refused + results[1]!.refused).toBeGreaterThan(0);

    // Every win wrote its run, and no refused attempt wrote one.
    const runs = await runsOf(store, "dagrapport");
    const begun = log.filter((l) => l.event === "begin").map((l) => l.run_id);
    expect(runs.length).toBe(2 * WINS);
    expect(begun.length).toBe(2 * WINS);
    expect(new Set(begun)).toEqual(new Set(runs.map((r) => r.id)));
    expect(await leaseRows(store)).toEqual([]);
  });
});
