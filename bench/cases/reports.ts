// dagrapport and beveiligingslog-analyse at scale: the real jobs on the benchmark
// database (its burst of failed logins in the last hour gives the analysis offenders).
// The figure is the first run in a fresh process (cold statements, warm file cache);
// the median of five more runs is printed beside it.
//
//   bun bench/cases/reports.ts --db <file> --job dagrapport|analyse [--smtp]
import { openStore } from "../../src/db.ts";
import { runBeveiligingslogAnalyse } from "../../src/jobs/beveiligingslog-analyse.ts";
import { runDagrapport } from "../../src/jobs/dagrapport.ts";
import { createMailer } from "../../src/mail/transport.ts";
import { arg, benchDeps, NOW, report } from "../lib.ts";
import { startSink, type Sink } from "../sink-client.ts";

const job = arg("job");
const withSmtp = process.argv.includes("--smtp");
const store = openStore(arg("db"), NOW);
let sink: Sink | null = null;
let deps = benchDeps(store);
if (withSmtp) {
  sink = await startSink();
  deps = benchDeps(store, { SMTP_URL: sink.url, DAGRAPPORT_EMAIL: "beheer@example.nl" });
  deps.mailer = createMailer({ smtpUrl: sink.url, from: deps.config.mailFrom, outboxDir: "/nonexistent" });
}

const once = async () => {
  const t0 = performance.now();
  const r = job === "dagrapport" ? await runDagrapport(deps, NOW) : await runBeveiligingslogAnalyse(deps, NOW);
  return { ms: performance.now() - t0, status: r.status, body: r.body as unknown as Record<string, unknown> };
};
const first = await once();
const more: number[] = [];
for (let i = 0; i < 5; i++) more.push((await once()).ms);
more.sort((a, b) => a - b);
await deps.mailer.close();
const received = sink ? (await sink.stop()).received : 0;
store.close();

const facts =
  job === "dagrapport"
    ? { verzonden: first.body.verzonden, received, inlogpogingen24u: (first.body.inlogpogingen as { totaal: number }).totaal }
    : { aantalVerdacht: first.body.aantalVerdacht };
report({ job, smtp: withSmtp, firstMs: first.ms, medianMs: more[2], status: first.status, ...facts });
