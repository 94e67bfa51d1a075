// Weekrapport: one tenant's last seven days, for each of its administrators.
import type { ReactNode } from "react";
import { aantal, getal } from "../src/format.ts";
import { Alinea, Feiten, Kengetallen, Kop, Label, Layout, StatusBanner, Tabel, type Niveau } from "./layout.tsx";

export interface WeeklyReportProps {
  tenant: string;
  /** ISO week, `2026-W30`. */
  week: string;
  /** Start and end of the period, `dd/mm/yyyy hh:mm` in `tijdzone`. */
  van: string;
  tot: string;
  tijdzone: string;
  status: { niveau: Niveau; kop: string; punten: string[] };
  audit: { totaal: number; perActie: { actie: string; aantal: number }[] };
  inlog: {
    totaal: number;
    gelukt: number;
    mislukt: number;
    /** Distinct IP addresses with at least one failed attempt. */
    mislukteIps: number;
    topMislukteIps: { ip: string; aantal: number }[];
    /** Unusually many failures (src/reports/weekly.ts veelMislukt): shown in amber. */
    opvallend: boolean;
  };
  keten: {
    staat: "intact" | "gebroken" | "nooit";
    /** `dd/mm/yyyy hh:mm`, null when never verified. */
    gecontroleerd: string | null;
    aantalEntries: number | null;
    fout: { seq: number | null; reden: string | null; uitleg: string } | null;
  };
  /**
   * Stored since the previous weekly report, dated before this week: in no earlier report
   * (src/reports/weekly.ts, lateRule). null or absent: nothing came late, no section.
   */
  laat?: {
    audit: { totaal: number; perActie: { actie: string; aantal: number }[] };
    inlog: { mislukt: number; ips: number };
  } | null;
}

function procent(deel: number, geheel: number): string {
  if (geheel === 0) return "–";
  const p = (deel / geheel) * 100;
  return `${p < 10 && p > 0 ? p.toFixed(1).replace(".", ",") : Math.round(p)}%`;
}

function Keten({ keten }: { keten: WeeklyReportProps["keten"] }) {
  if (keten.staat === "nooit") {
    return (
      <Alinea>
        <Label niveau="let-op">Nog nooit gecontroleerd.</Label> De dagelijkse controle (audit-verificatie) heeft deze keten nog niet
        gezien; na de eerstvolgende nachtelijke controle staat hier de uitkomst.
      </Alinea>
    );
  }
  const rijen: [string, ReactNode][] = [
    ["Uitkomst", keten.staat === "intact" ? <Label niveau="ok">Intact</Label> : <Label niveau="actie">Gebroken</Label>],
    ["Laatst gecontroleerd", keten.gecontroleerd ?? "–"],
    ["Entries in de keten", keten.aantalEntries === null ? "–" : getal(keten.aantalEntries)],
  ];
  if (keten.fout) {
    rijen.push(["Eerste fout bij volgnummer", keten.fout.seq === null ? "–" : getal(keten.fout.seq)]);
    rijen.push(["Reden", keten.fout.uitleg]);
  }
  return (
    <>
      <Feiten rijen={rijen} />
      {keten.staat === "gebroken" ? (
        <Alinea>
          Een gebroken keten betekent dat het auditlog of de ondertekende vastlegging ervan na het schrijven is veranderd of
          ingekort. Neem contact op met de beheerder van de dienst; de database en de back-ups van vóór de fout zijn het
          bewijsmateriaal.
        </Alinea>
      ) : null}
    </>
  );
}

function Laat({ laat }: { laat: NonNullable<WeeklyReportProps["laat"]> }) {
  return (
    <>
      <Kop>Laat binnengekomen</Kop>
      <Alinea>
        Na het vorige weekrapport binnengekomen, met een tijdstip in of vóór de week van dat rapport (bijvoorbeeld uit de
        wachtrij van de applicatie na een storing). Ze stonden in geen eerder weekrapport.
      </Alinea>
      {laat.audit.totaal > 0 ? (
        <Tabel
          kolommen={[{ kop: "Actie" }, { kop: "Aantal", rechts: true }]}
          rijen={laat.audit.perActie.map((r) => [r.actie, getal(r.aantal)])}
        />
      ) : null}
      <Feiten
        rijen={[
          ["Audit-gebeurtenissen", getal(laat.audit.totaal)],
          ["Mislukte inlogpogingen", getal(laat.inlog.mislukt)],
          ["IP-adressen met mislukte pogingen", getal(laat.inlog.ips)],
        ]}
      />
    </>
  );
}

export function WeeklyReport(p: WeeklyReportProps) {
  const weekNr = Number(p.week.slice(p.week.indexOf("W") + 1));
  return (
    <Layout
      preview={`${p.status.kop} · ${aantal(p.audit.totaal, "audit-gebeurtenis", "audit-gebeurtenissen")} · ${aantal(p.inlog.mislukt, "mislukte inlogpoging", "mislukte inlogpogingen")}`}
      soort={`Weekrapport · week ${weekNr}`}
      titel={p.tenant}
      tijdzone={p.tijdzone}
    >
      <Alinea>
        Beste beheerder, dit is het overzicht van <strong>{p.tenant}</strong> over de afgelopen zeven dagen: van {p.van} tot{" "}
        {p.tot}.
      </Alinea>
      <StatusBanner niveau={p.status.niveau} label={`Status van week ${weekNr}`} kop={p.status.kop} punten={p.status.punten} />
      <Kengetallen
        items={[
          { waarde: getal(p.audit.totaal), label: "audit-gebeurtenissen" },
          { waarde: getal(p.inlog.gelukt), label: "geslaagde inlogpogingen" },
          { waarde: getal(p.inlog.mislukt), label: "mislukte inlogpogingen", niveau: p.inlog.opvallend ? "let-op" : "ok" },
          {
            waarde: p.keten.staat === "intact" ? "Intact" : p.keten.staat === "gebroken" ? "Gebroken" : "Onbekend",
            label: "auditketen",
            niveau: p.keten.staat === "intact" ? "ok" : p.keten.staat === "gebroken" ? "actie" : "let-op",
          },
        ]}
      />

      <Kop>Auditketen</Kop>
      <Keten keten={p.keten} />

      <Kop>Audit-activiteit per actie</Kop>
      <Tabel
        kolommen={[{ kop: "Actie" }, { kop: "Aantal", rechts: true }, { kop: "Aandeel", rechts: true }]}
        rijen={p.audit.perActie.map((r) => [r.actie, getal(r.aantal), procent(r.aantal, p.audit.totaal)])}
        leeg="Geen audit-gebeurtenissen in deze periode."
      />

      <Kop>Inlogpogingen</Kop>
      <Feiten
        rijen={[
          ["Totaal", getal(p.inlog.totaal)],
          ["Geslaagd", getal(p.inlog.gelukt)],
          ["Mislukt", p.inlog.opvallend ? <Label niveau="let-op">{getal(p.inlog.mislukt)}</Label> : getal(p.inlog.mislukt)],
          ["IP-adressen met mislukte pogingen", getal(p.inlog.mislukteIps)],
        ]}
      />
      {p.inlog.topMislukteIps.length > 0 ? (
        <>
          <Alinea gedempt>IP-adressen met de meeste mislukte pogingen:</Alinea>
          <Tabel
            kolommen={[{ kop: "IP-adres" }, { kop: "Mislukt", rechts: true }]}
            rijen={p.inlog.topMislukteIps.map((r) => [r.ip, getal(r.aantal)])}
          />
        </>
      ) : null}

      {p.laat ? <Laat laat={p.laat} /> : null}

      <Alinea gedempt>U ontvangt dit bericht omdat u beheerder bent van {p.tenant}. Week {p.week}.</Alinea>
    </Layout>
  );
}

WeeklyReport.PreviewProps = {
  tenant: "Gemeente Zuiderhaven",
  week: "2026-W30",
  van: "19/07/2026 20:00",
  tot: "26/07/2026 20:00",
  tijdzone: "Europe/Amsterdam",
  status: { niveau: "ok", kop: "Alles in orde", punten: [] },
  audit: {
    totaal: 1842,
    perActie: [
      { actie: "dossier.bekeken", aantal: 1204 },
      { actie: "dossier.gewijzigd", aantal: 388 },
      { actie: "gebruiker.ingelogd", aantal: 201 },
      { actie: "export.gemaakt", aantal: 37 },
      { actie: "rechten.gewijzigd", aantal: 12 },
    ],
  },
  inlog: {
    totaal: 229,
    gelukt: 201,
    mislukt: 28,
    mislukteIps: 6,
    topMislukteIps: [
      { ip: "203.0.113.17", aantal: 14 },
      { ip: "198.51.100.4", aantal: 7 },
      { ip: "192.0.2.55", aantal: 4 },
    ],
    opvallend: false,
  },
  keten: { staat: "intact", gecontroleerd: "26/07/2026 03:00", aantalEntries: 48211, fout: null },
  laat: {
    audit: { totaal: 14, perActie: [{ actie: "dossier.bekeken", aantal: 11 }, { actie: "dossier.gewijzigd", aantal: 3 }] },
    inlog: { mislukt: 4, ips: 2 },
  },
} satisfies WeeklyReportProps;

export default WeeklyReport;
