// Alarm: one e-mail per serious alarm (broken chain, failed or missing backup, database
// integrity, storage that takes no writes), to the daily-report recipient, with what
// happened and what to do.
import { Alinea, Feiten, Kop, Layout, StatusBanner } from "./layout.tsx";

export interface AlarmProps {
  /** The alarm type code, e.g. `audit-chain-broken`. */
  type: string;
  /** Dutch name of the alarm, e.g. "Auditketen gebroken". */
  titel: string;
  /** The alarm's own sentence. */
  message: string;
  /** When it was raised, `dd/mm/yyyy hh:mm` in `tijdzone`. */
  tijdstip: string;
  tijdzone: string;
  /** The alarm's context as label/value text, already shortened. */
  context: { sleutel: string; waarde: string }[];
  /** Steps for the operator, in order. */
  watTeDoen: string[];
}

export function Alarm(p: AlarmProps) {
  return (
    <Layout preview={p.message} soort={`Alarm · ${p.type}`} titel={p.titel} tijdzone={p.tijdzone}>
      <StatusBanner niveau="actie" label={`Alarm · ${p.tijdstip}`} kop={p.message} />
      <Kop>Wat te doen</Kop>
      <ol style={{ color: "#1f2937", fontSize: "14px", lineHeight: "21px", margin: "8px 0", paddingLeft: "22px" }}>
        {p.watTeDoen.map((stap, i) => (
          <li key={i} style={{ marginBottom: "4px" }}>
            {stap}
          </li>
        ))}
      </ol>
      <Kop>Gegevens</Kop>
      <Feiten rijen={[["Type", p.type], ["Tijdstip", p.tijdstip], ...p.context.map((c): [string, string] => [c.sleutel, c.waarde])]} />
      <Alinea gedempt>
        Dit alarm staat ook in het log van de service (stderr) en, als SENTRY_DSN is ingesteld, in de foutregistratie. U ontvangt het
        omdat dit adres als DAGRAPPORT_EMAIL of SUPPORT_EMAIL is ingesteld.
      </Alinea>
    </Layout>
  );
}

Alarm.PreviewProps = {
  type: "audit-chain-broken",
  titel: "Auditketen gebroken",
  message: "De auditketen van 1 tenant is gebroken: Gemeente Zuiderhaven (volgnummer 18.204, hash-afwijkend).",
  tijdstip: "23/07/2026 03:00",
  tijdzone: "Europe/Amsterdam",
  context: [
    { sleutel: "gecontroleerd", waarde: "42" },
    { sleutel: "aantalGebroken", waarde: "1" },
    { sleutel: "gebroken", waarde: "tenantId: 7, tenant: Gemeente Zuiderhaven, seq: 18204, entryId: 90211, reden: hash-afwijkend" },
  ],
  watTeDoen: [
    "Verander niets aan de database en maak direct een kopie van het databasebestand en het ankerbestand: dat is het bewijs.",
    "Zoek in de gegevens hieronder de tenant en het volgnummer van de eerste fout en vergelijk die entries met een back-up van vóór de fout.",
    "Ga na wie schrijftoegang tot de database had (host, back-up, beheerders) en meld een mogelijk beveiligingsincident.",
  ],
} satisfies AlarmProps;

export default Alarm;
