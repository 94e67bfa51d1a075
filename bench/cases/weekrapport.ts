// weekrapport at scale: the real job and the real pooled SMTP mailer, delivering to
// bench/smtp-sink.ts in another process. The delivery guard of the job's ISO week is
// emptied first, so every run sends every message. After the job (its peak RSS taken
// first) a profile pass times the parts alone: the per-tenant statistics (SQLite) and
// the rendering of the first tenants' reports.
//
//   bun bench/cases/weekrapport.ts --db <file>
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WeeklyReport } from "../../emails/WeeklyReport.tsx";
import { openStore } from "../../src/db.ts";
import { isoWeek } from "../../src/format.ts";
import { reportEnd, runWeekrapport } from "../../src/jobs/weekrapport.ts";
import { renderEmail } from "../../src/mail/render.ts";
import { createMailer } from "../../src/mail/transport.ts";
import { tenantWeekStats, WEEK_MS, weekLogins, weeklyReportProps } from "../../src/reports/weekly.ts";
import { arg, BENCH_SIGNING_KEY, benchDeps, NOW, peakRssMb, report } from "../lib.ts";
import { auditKeys } from "../../src/audit/keys.ts";
import { rowSeal } from "../../src/row-seal.ts";
import { verificationSinceIn } from "../../src/reports/daily.ts";
import { startSink } from "../sink-client.ts";

const store = openStore(arg("db"), NOW);
const { sqlite } = store;
// The job's week is that of its last scheduled time (reportEnd), not NOW's: deleting NOW's
// week left the previous run's deliveries, and a second run on the cached data sent nothing.
sqlite.query("DELETE FROM weekly_report_deliveries WHERE iso_week = ?").run(isoWeek(reportEnd(NOW)));

const sink = await startSink();
const outbox = mkdtempSync(join(tmpdir(), "nachtwacht-bench-outbox-"));
const deps = benchDeps(store, { SMTP_URL: sink.url });
deps.mailer = createMailer({ smtpUrl: sink.url, from: deps.config.mailFrom, outboxDir: outbox });

const t0 = performance.now();
const r = await runWeekrapport(deps, NOW);
const seconds = (performance.now() - t0) / 1000;
const jobPeakRssMb = peakRssMb();
await deps.mailer.close();
const received = await sink.stop();
rmSync(outbox, { recursive: true, force: true });
if (r.body.fouten > 0) throw new Error(`${r.body.fouten} messages failed`);

// Profile: statistics of every active tenant with administrators, rendering of the first 100.
const tenants = (sqlite.query("SELECT DISTINCT t.id, t.naam FROM tenants t JOIN administrators a ON a.tenant_id = t.id AND a.actief = 1 WHERE t.actief = 1 ORDER BY t.id").all() as { id: number; naam: string }[]);
const van = new Date(NOW.getTime() - WEEK_MS);
const s0 = performance.now();
const logins = await weekLogins(store.db, van, NOW);
const seal = rowSeal(auditKeys({ auditAnkerSleutel: BENCH_SIGNING_KEY, auditVertrouwdeSleutels: [] }));
const since = verificationSinceIn(store.db, seal, NOW, deps.config);
const stats = tenants.map((t) => tenantWeekStats(store.db, seal, t.id, van, NOW, logins, NOW, since));
const statsSeconds = (performance.now() - s0) / 1000;
const sample = Math.min(100, tenants.length);
const r0 = performance.now();
let htmlBytes = 0;
for (let i = 0; i < sample; i++) {
  const { html } = await renderEmail(WeeklyReport, weeklyReportProps(tenants[i]!.naam, stats[i]!, { week: isoWeek(NOW), van, tot: NOW, tijdzone: deps.config.rapportTijdzone }));
  htmlBytes += html.length;
}
const renderMsPerTenant = (performance.now() - r0) / sample;

store.close();
report({
  seconds,
  verstuurd: r.body.verstuurd,
  received: received.received,
  perSecond: r.body.verstuurd / seconds,
  jobPeakRssMb,
  tenants: tenants.length,
  profile: {
    statsSeconds,
    renderSeconds: (renderMsPerTenant * tenants.length) / 1000,
    renderMsPerTenant,
    htmlKbPerMessage: htmlBytes / sample / 1024,
    smtpBytesPerMessage: received.bytes / Math.max(1, received.received),
  },
});
