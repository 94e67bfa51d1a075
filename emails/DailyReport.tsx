// Dagrapport: the operator's morning overview. The props are exactly the report the
// dagrapport job answers with (src/reports/daily.ts builds them).
import type { ReactNode } from "react";
import { backupUitkomst, displayText, getal } from "../src/format.ts";
import type { JobStatusName } from "../src/schedule-due.ts";
import { Alinea, Code, Codeblok, Feiten, Kengetallen, Kop, Label, Layout, StatusBanner, Tabel, type Niveau } from "./layout.tsx";

export type Uitkomst = "ok" | "afwijking" | "fout" | "bezig" | "nooit";

export interface DailyReportProps {
  /** When the report was made, `dd/mm/yyyy hh:mm` in `tijdzone`. */
  gemaakt: string;
  tijdzone: string;
  status: { niveau: Niveau; kop: string; punten: string[] };
  /** From the newest BackupStatus; FOUT and '-' when none was ever reported. */
  backup: { resultaat: "OK" | "FOUT"; gelukt: boolean; datum: string; grootte: string; bron: string };
  backupDetail: {
    /** ISO receive time of the newest BackupStatus, null when none. */
    ontvangen: string | null;
    exitCode: number | null;
    bestandsnaam: string | null;
    foutmelding: string | null;
    ouderdomUren: number | null;
    maxUren: number;
    /** Older than BACKUP_MAX_UREN. */
    teOud: boolean;
    /** The newest report dated ahead (received while the host clock ran ahead; it does not count), null when none. */
    toekomst: { ontvangen: string; datum: string; gelukt: boolean; exitCode: number; foutmelding: string | null } | null;
  };
  inlogpogingen: {
    van: string;
    tot: string;
    totaal: number;
    gelukt: number;
    mislukt: number;
    mislukteIps: number;
    topMislukteIps: { ip: string; aantal: number }[];
  };
  verificatie: {
    /** Latest verification of any tenant, or '-'. */
    tijdstip: string;
    gecontroleerd: number;
    nietGecontroleerd: number;
    aantalGebroken: number;
    gebroken: { tenantId: number; tenant: string; seq: number | null; reden: string | null; uitleg: string; gecontroleerd: string }[];
  };
  /** What the operator keeps off the machine, and the key an auditor checks it with. */
  anker: {
    /**
     * The anchor file's newest installation checkpoint, verbatim: a signed note (origin,
     * tree size, root, a blank line, the signature line), ending in "\n", that opened
     * under a trusted key. null before audit-anker first signed one, or when it does not
     * open (checkpointProbleem).
     */
    installatieCheckpoint: string | null;
    /** Dutch: the file's newest installation line does not open, or the database's copy differs from it; null when all agrees. Also a status point. */
    checkpointProbleem: string | null;
    /** The public verifier key (<naam>+<id>+<sleutel>); never the signing key. */
    verificatieSleutel: string;
    /** What the operator signed by hand (adoptions, accepted restores), one sentence each; named every day. */
    waarschuwingen: string[];
  };
  taken: {
    job: string;
    cron: string;
    uitkomst: Uitkomst;
    laatsteStart: string;
    laatsteEinde: string;
    /** How long the last run took, in milliseconds; null while it runs, or when it never ran or never ended. */
    laatsteDuurMs: number | null;
    /** laatsteDuurMs as text (`12.4 s`, `3 min 05 s`), '-' without. */
    laatsteDuur: string;
    /** The median duration of the last (at most) ten successful runs, in milliseconds; null without one. */
    gebruikelijkeDuurMs: number | null;
    gebruikelijkeDuur: string;
    /** How many successful runs that median is over (0–10). */
    gebruikelijkOver: number;
    laatstVerwacht: string;
    volgende: string;
    achterstallig: boolean;
    /** The job's status by taken-controle's rule (statusesOf): `onderbroken` and `hangt` are labelled in the table and are status points. */
    status: JobStatusName;
  }[];
  /** klokAfwijkingSeconden: PostgreSQL only, how far the server's clock is ahead of this host's; null on SQLite. Shown as a status point when over the limit. */
  database: { bytes: number; grootte: string; walBytes: number; klokAfwijkingSeconden: number | null };
  /** Each file system nachtwacht writes to on this host, once, with what it keeps there (src/disk-space.ts). */
  schijf: {
    bestanden: ("database" | "ankerbestand" | "outbox")[];
    map: string;
    vrijBytes: number;
    totaalBytes: number;
    /** vrijBytes and totaalBytes as text (formatSize). */
    vrij: string;
    totaal: string;
    /** The free share in percent, to one decimal. */
    vrijProcent: number;
    /** Against SCHIJF_MIN_VRIJ_PROCENT: let-op below it, actie below half of it. */
    niveau: Niveau;
  }[];
  /** The tenants against TENANTS_MAX (tenantsLevel): actie at it (new tenants are refused), let-op from 90 % of it. Also a status point. */
  tenants: { aantal: number; max: number; niveau: Niveau };
  /**
   * beveiligingslog-analyse's late failed logins, postponed run after run (PostgreSQL, a
   * batch of login attempts holding their lock): runs in a row and since when (dd/mm/yyyy
   * hh:mm, null when not postponed). let-op past an hour, also a status point.
   */
  laatUitgesteld: { runs: number; sinds: string | null; niveau: "ok" | "let-op" };
}

const UITKOMST: Record<Uitkomst, { tekst: string; niveau: Niveau | null }> = {
  ok: { tekst: "OK", niveau: "ok" },
  afwijking: { tekst: "Afwijking", niveau: "let-op" },
  fout: { tekst: "Fout", niveau: "actie" },
  bezig: { tekst: "Bezig", niveau: null },
  nooit: { tekst: "Nog nooit", niveau: null },
};

/** `19/07/2026 20:00` → `19/07 20:00` inside the jobs table; another year keeps its year. */
function kort(datum: string, jaar: string): string {
  if (datum.length !== 16 || datum.slice(6, 10) !== jaar) return datum;
  return `${datum.slice(0, 5)} ${datum.slice(11)}`;
}

/** The last run's duration with the usual one (the median of the last successful runs) beside it. */
function duur(t: DailyReportProps["taken"][number]): string {
  if (t.gebruikelijkeDuurMs === null) return t.laatsteDuur;
  return `${t.laatsteDuur} (${t.gebruikelijkeDuur})`;
}

/** A report dated ahead in one line, for the report's point and this table: when, and how it ended. */
export function toekomstTekst(t: NonNullable<DailyReportProps["backupDetail"]["toekomst"]>): string {
  return `ontvangen ${t.datum}, ${backupUitkomst(t)}${!t.gelukt && t.foutmelding ? `: ${t.foutmelding}` : ""}`;
}

function Backup({ p }: { p: DailyReportProps }) {
  const b = p.backup;
  const d = p.backupDetail;
  if (d.ontvangen === null) {
    return (
      <Alinea>
        <Label niveau="actie">FOUT: er is nog nooit een back-up gemeld.</Label> De back-up op de host meldt zich na elke run bij
        backup-status; controleer of die taak in de crontab staat en draait.
      </Alinea>
    );
  }
  const rijen: [string, ReactNode][] = [
    ["Resultaat", <Label niveau={b.gelukt ? "ok" : "actie"}>{b.resultaat}</Label>],
    ["Datum", d.teOud ? <Label niveau="actie">{`${b.datum} (${d.ouderdomUren} uur geleden, grens ${d.maxUren} uur)`}</Label> : b.datum],
    ["Grootte", b.grootte],
    // The host's words, as sent to backup-status (the JSON keeps them as they are): one line each.
    ["Bestand", d.bestandsnaam === null ? "-" : displayText(d.bestandsnaam)],
    ["Bron", b.bron],
  ];
  if (!b.gelukt) {
    rijen.push(["Exitcode", String(d.exitCode)]);
    rijen.push(["Foutmelding", d.foutmelding === null ? "(geen)" : displayText(d.foutmelding)]);
  }
  if (d.toekomst) rijen.push(["In de toekomst", <Label niveau="actie">{displayText(toekomstTekst(d.toekomst))}</Label>]);
  return <Feiten rijen={rijen} />;
}

export function DailyReport(p: DailyReportProps) {
  // The tile counts what the banner's points count: late, and also hung or interrupted
  // (hangt is an actie point), so that it never says "Op tijd" beside one.
  const achterstallig = p.taken.filter((t) => t.achterstallig).length;
  const vast = p.taken.filter((t) => !t.achterstallig && (t.status === "hangt" || t.status === "onderbroken")).length;
  const takenNiveau: Niveau = p.taken.some((t) => t.status === "hangt") ? "actie" : "let-op";
  const jaar = p.gemaakt.slice(6, 10);
  return (
    <Layout preview={`${p.status.kop}${p.status.punten.length ? ` · ${p.status.punten[0]}` : ""}`} soort="Dagrapport" titel={`Dagrapport van ${p.gemaakt.slice(0, 10)}`} tijdzone={p.tijdzone}>
      <StatusBanner niveau={p.status.niveau} label={`Status op ${p.gemaakt}`} kop={p.status.kop} punten={p.status.punten} />
      <Kengetallen
        items={[
          { waarde: p.backup.resultaat, label: "laatste back-up", niveau: p.backup.gelukt && !p.backupDetail.teOud ? "ok" : "actie" },
          {
            waarde: p.verificatie.aantalGebroken === 0 ? "Intact" : getal(p.verificatie.aantalGebroken),
            label: p.verificatie.aantalGebroken === 0 ? "auditketens" : "gebroken auditketens",
            niveau: p.verificatie.aantalGebroken === 0 ? "ok" : "actie",
          },
          { waarde: getal(p.inlogpogingen.mislukt), label: "mislukte logins (24 uur)" },
          {
            waarde: achterstallig + vast === 0 ? "Op tijd" : getal(achterstallig + vast),
            label: achterstallig + vast === 0 ? "geplande taken" : vast === 0 ? "taken te laat" : achterstallig === 0 ? "taken vastgelopen" : "taken te laat of vastgelopen",
            niveau: achterstallig + vast === 0 ? "ok" : takenNiveau,
          },
        ]}
      />

      <Kop>Back-up</Kop>
      <Backup p={p} />

      <Kop>Controle van de auditketens</Kop>
      <Feiten
        rijen={[
          ["Laatste controle", p.verificatie.tijdstip],
          ["Tenants gecontroleerd", getal(p.verificatie.gecontroleerd)],
          ["Nog niet gecontroleerd", getal(p.verificatie.nietGecontroleerd)],
          ["Gebroken ketens", p.verificatie.aantalGebroken === 0 ? <Label niveau="ok">0</Label> : <Label niveau="actie">{getal(p.verificatie.aantalGebroken)}</Label>],
        ]}
      />
      {p.verificatie.gebroken.length > 0 ? (
        <>
          <Alinea>Gebroken ketens: dit kan op manipulatie van het auditlog wijzen. Bewaar de database, het ankerbestand en de back-ups van vóór de fout.</Alinea>
          <Tabel
            kolommen={[{ kop: "Tenant" }, { kop: "Volgnr.", rechts: true }, { kop: "Reden" }]}
            rijen={p.verificatie.gebroken.map((g) => [`${displayText(g.tenant)} (#${g.tenantId})`, g.seq === null ? "–" : getal(g.seq), g.uitleg])}
          />
        </>
      ) : null}

      <Kop>Installatie-checkpoint</Kop>
      {p.anker.checkpointProbleem !== null ? (
        <Alinea>
          <Label niveau="actie">Afwijking</Label> {p.anker.checkpointProbleem}
        </Alinea>
      ) : null}
      {p.anker.installatieCheckpoint === null ? (
        p.anker.checkpointProbleem !== null ? null : (
          <Alinea>
            Er is nog geen installatie-checkpoint: audit-anker heeft nog niets ondertekend. Na de eerstvolgende run van audit-anker
            staat het hier.
          </Alinea>
        )
      ) : (
        <>
          <Alinea>
            Bewaar deze e-mail buiten deze server: <Code>nachtwacht verify --checkpoint &lt;bestand&gt;</Code>, met het blok
            hieronder als bestand, controleert of de database en het ankerbestand deze ondertekende toestand nog bevatten.
          </Alinea>
          <Codeblok>{p.anker.installatieCheckpoint}</Codeblok>
        </>
      )}
      <Alinea>Openbare verificatiesleutel, waarmee een auditor de handtekening controleert:</Alinea>
      <Codeblok>{p.anker.verificatieSleutel}</Codeblok>
      {p.anker.waarschuwingen.length > 0 ? (
        <>
          <Alinea>Door de beheerder ondertekende uitzonderingen op de auditketen (blijven elke dag hier staan):</Alinea>
          {p.anker.waarschuwingen.map((w, i) => (
            <Alinea key={i}>• {w}</Alinea>
          ))}
        </>
      ) : null}

      <Kop>Inlogpogingen, laatste 24 uur</Kop>
      <Feiten
        rijen={[
          ["Totaal", getal(p.inlogpogingen.totaal)],
          ["Geslaagd", getal(p.inlogpogingen.gelukt)],
          ["Mislukt", getal(p.inlogpogingen.mislukt)],
          ["IP-adressen met mislukte pogingen", getal(p.inlogpogingen.mislukteIps)],
        ]}
      />
      {p.inlogpogingen.topMislukteIps.length > 0 ? (
        <Tabel
          kolommen={[{ kop: "IP-adres met de meeste mislukte pogingen" }, { kop: "Mislukt", rechts: true }]}
          rijen={p.inlogpogingen.topMislukteIps.map((r) => [r.ip, getal(r.aantal)])}
        />
      ) : null}

      <Kop>Geplande taken</Kop>
      <Tabel
        kolommen={[
          { kop: "Taak", nowrap: true },
          { kop: "Laatste start", nowrap: true },
          { kop: "Uitkomst" },
          { kop: "Duur (meestal)", nowrap: true },
          { kop: "Volgende", nowrap: true },
        ]}
        rijen={p.taken.map((t) => {
          const u = UITKOMST[t.uitkomst];
          return [
            t.job,
            kort(t.laatsteStart, jaar),
            t.achterstallig ? (
              <Label niveau="let-op">{`Te laat, verwacht ${kort(t.laatstVerwacht, jaar)}`}</Label>
            ) : t.status === "onderbroken" ? (
              <Label niveau="let-op">Onderbroken</Label>
            ) : t.status === "hangt" ? (
              <Label niveau="actie">Hangt</Label>
            ) : u.niveau ? (
              <Label niveau={u.niveau}>{u.tekst}</Label>
            ) : (
              u.tekst
            ),
            duur(t),
            kort(t.volgende, jaar),
          ];
        })}
      />

      <Kop>Database</Kop>
      <Feiten
        rijen={[
          ["Grootte", `${p.database.grootte} (${getal(p.database.bytes)} bytes)`],
          ["Waarvan write-ahead log", `${getal(p.database.walBytes)} bytes`],
          [
            "Tenants",
            p.tenants.niveau === "ok" ? `${getal(p.tenants.aantal)} (TENANTS_MAX ${getal(p.tenants.max)})` : <Label niveau={p.tenants.niveau}>{`${getal(p.tenants.aantal)} (TENANTS_MAX ${getal(p.tenants.max)})`}</Label>,
          ],
        ]}
      />

      <Kop>Schijfruimte</Kop>
      <Tabel
        kolommen={[{ kop: "Schijf van" }, { kop: "Map" }, { kop: "Vrij", rechts: true }, { kop: "Totaal", rechts: true }]}
        rijen={p.schijf.map((f) => [
          f.bestanden.join(", "),
          f.map,
          f.niveau === "ok" ? `${f.vrij} (${f.vrijProcent} %)` : <Label niveau={f.niveau}>{`${f.vrij} (${f.vrijProcent} %)`}</Label>,
          f.totaal,
        ])}
      />
      <Alinea gedempt>Gemaakt op {p.gemaakt}.</Alinea>
    </Layout>
  );
}

DailyReport.PreviewProps = {
  gemaakt: "23/07/2026 08:00",
  tijdzone: "Europe/Amsterdam",
  status: {
    niveau: "let-op",
    kop: "Aandacht nodig",
    punten: ["De laatste run van beveiligingslog-analyse (23/07/2026 07:45) vond een afwijking."],
  },
  backup: { resultaat: "OK", gelukt: true, datum: "23/07/2026 03:12", grootte: "23.4 MB", bron: "host-cron" },
  backupDetail: {
    ontvangen: "2026-07-23T01:12:00.000Z",
    exitCode: 0,
    bestandsnaam: "nachtwacht-2026-07-23.db.zst",
    foutmelding: null,
    ouderdomUren: 4,
    maxUren: 26,
    teOud: false,
    toekomst: null,
  },
  inlogpogingen: {
    van: "22/07/2026 08:00",
    tot: "23/07/2026 08:00",
    totaal: 1294,
    gelukt: 1187,
    mislukt: 107,
    mislukteIps: 19,
    topMislukteIps: [
      { ip: "203.0.113.17", aantal: 41 },
      { ip: "198.51.100.4", aantal: 12 },
      { ip: "192.0.2.55", aantal: 6 },
    ],
  },
  verificatie: { tijdstip: "23/07/2026 03:00", gecontroleerd: 42, nietGecontroleerd: 0, aantalGebroken: 0, gebroken: [] },
  anker: {
    checkpointProbleem: null,
    installatieCheckpoint:
      "nachtwacht.zuiderhaven.nl/audit/installatie\n1873\nDuL77MTej25munc5vNg7hiNzed0ORLwlOAxlf0NsOOs=\n\n" +
      "\u2014 nachtwacht.zuiderhaven.nl/audit hOAEN0JqlqjgBqHBYakQZE/iT5U6OPhvfoIXO0kTScPFh/FR2afkjF1QAjvN5oZpO334lWo8owF1wQEUpzMW99VmCwY=\n",
    verificatieSleutel: "nachtwacht.zuiderhaven.nl/audit+84e00437+AfPPJGLHWCXskLnJfYcHKOkkktoe1IRUgcS+39nOPJ/U",
    waarschuwingen: [],
  },
  taken: [
    { job: "weekrapport", cron: "0 18 * * 0", uitkomst: "ok", laatsteStart: "19/07/2026 20:00", laatsteEinde: "19/07/2026 20:01", laatsteDuurMs: 61200, laatsteDuur: "1 min 01 s", gebruikelijkeDuurMs: 58900, gebruikelijkeDuur: "58.9 s", gebruikelijkOver: 10, laatstVerwacht: "19/07/2026 20:00", volgende: "26/07/2026 20:00", achterstallig: false, status: "ok" },
    { job: "audit-retentie", cron: "0 2 1 1 *", uitkomst: "ok", laatsteStart: "01/01/2026 03:00", laatsteEinde: "01/01/2026 03:02", laatsteDuurMs: 124000, laatsteDuur: "2 min 04 s", gebruikelijkeDuurMs: 118000, gebruikelijkeDuur: "1 min 58 s", gebruikelijkOver: 2, laatstVerwacht: "01/01/2026 03:00", volgende: "01/01/2027 03:00", achterstallig: false, status: "ok" },
    { job: "beveiligingslog-retentie", cron: "0 3 * * *", uitkomst: "ok", laatsteStart: "23/07/2026 05:00", laatsteEinde: "23/07/2026 05:00", laatsteDuurMs: 1900, laatsteDuur: "1.9 s", gebruikelijkeDuurMs: 2100, gebruikelijkeDuur: "2.1 s", gebruikelijkOver: 10, laatstVerwacht: "23/07/2026 05:00", volgende: "24/07/2026 05:00", achterstallig: false, status: "ok" },
    { job: "audit-verificatie", cron: "0 1 * * *", uitkomst: "ok", laatsteStart: "23/07/2026 03:00", laatsteEinde: "23/07/2026 03:00", laatsteDuurMs: 14300, laatsteDuur: "14.3 s", gebruikelijkeDuurMs: 13800, gebruikelijkeDuur: "13.8 s", gebruikelijkOver: 10, laatstVerwacht: "23/07/2026 03:00", volgende: "24/07/2026 03:00", achterstallig: false, status: "ok" },
    { job: "dagrapport", cron: "0 6 * * *", uitkomst: "ok", laatsteStart: "22/07/2026 08:00", laatsteEinde: "22/07/2026 08:00", laatsteDuurMs: 190, laatsteDuur: "190 ms", gebruikelijkeDuurMs: 180, gebruikelijkeDuur: "180 ms", gebruikelijkOver: 10, laatstVerwacht: "22/07/2026 08:00", volgende: "24/07/2026 08:00", achterstallig: false, status: "ok" },
    { job: "audit-anker", cron: "30 1 * * *", uitkomst: "ok", laatsteStart: "23/07/2026 03:30", laatsteEinde: "23/07/2026 03:30", laatsteDuurMs: 720, laatsteDuur: "720 ms", gebruikelijkeDuurMs: 450, gebruikelijkeDuur: "450 ms", gebruikelijkOver: 10, laatstVerwacht: "23/07/2026 03:30", volgende: "24/07/2026 03:30", achterstallig: false, status: "ok" },
    { job: "backup-controle", cron: "15 * * * *", uitkomst: "ok", laatsteStart: "23/07/2026 07:15", laatsteEinde: "23/07/2026 07:15", laatsteDuurMs: 4, laatsteDuur: "4 ms", gebruikelijkeDuurMs: 4, gebruikelijkeDuur: "4 ms", gebruikelijkOver: 10, laatstVerwacht: "23/07/2026 07:15", volgende: "23/07/2026 08:15", achterstallig: false, status: "ok" },
    { job: "taken-controle", cron: "45 * * * *", uitkomst: "ok", laatsteStart: "23/07/2026 07:45", laatsteEinde: "23/07/2026 07:45", laatsteDuurMs: 31, laatsteDuur: "31 ms", gebruikelijkeDuurMs: 28, gebruikelijkeDuur: "28 ms", gebruikelijkOver: 10, laatstVerwacht: "23/07/2026 07:45", volgende: "23/07/2026 08:45", achterstallig: false, status: "ok" },
    { job: "beveiligingslog-analyse", cron: "*/15 * * * *", uitkomst: "afwijking", laatsteStart: "23/07/2026 07:45", laatsteEinde: "23/07/2026 07:45", laatsteDuurMs: 2, laatsteDuur: "2 ms", gebruikelijkeDuurMs: 1, gebruikelijkeDuur: "1 ms", gebruikelijkOver: 10, laatstVerwacht: "23/07/2026 07:45", volgende: "23/07/2026 08:15", achterstallig: false, status: "ok" },
    { job: "db-onderhoud", cron: "0 4 * * 0", uitkomst: "ok", laatsteStart: "19/07/2026 06:00", laatsteEinde: "19/07/2026 06:00", laatsteDuurMs: 3400, laatsteDuur: "3.4 s", gebruikelijkeDuurMs: 3100, gebruikelijkeDuur: "3.1 s", gebruikelijkOver: 10, laatstVerwacht: "19/07/2026 06:00", volgende: "26/07/2026 06:00", achterstallig: false, status: "ok" },
  ],
  database: { bytes: 48_922_624, grootte: "46.7 MB", walBytes: 4_128_768, klokAfwijkingSeconden: null },
  schijf: [{ bestanden: ["database", "ankerbestand"], map: "/var/lib/nachtwacht", vrijBytes: 41_875_931_136, totaalBytes: 105_089_261_568, vrij: "39.0 GB", totaal: "97.9 GB", vrijProcent: 39.8, niveau: "ok" }],
  tenants: { aantal: 42, max: 5000, niveau: "ok" },
  laatUitgesteld: { runs: 0, sinds: null, niveau: "ok" },
} satisfies DailyReportProps;

export default DailyReport;
