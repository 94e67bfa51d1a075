// The shared look of every nachtwacht e-mail: a header bar, a status banner, key
// figures, section titles and data tables. Inline styles and tables only, because
// that is what mail clients render; the plain-text part is derived from the same HTML
// (data tables carry data-text-format="dataTable" so they stay tables in text).
// Each component from its own package, not from @react-email/components: that index
// also loads its code-block component, whose Prism with all its languages took 200 ms
// of the binary's start (docs/performance.md, round 24).
import { Body } from "@react-email/body";
import { Column } from "@react-email/column";
import { Container } from "@react-email/container";
import { Head } from "@react-email/head";
import { Heading } from "@react-email/heading";
import { Hr } from "@react-email/hr";
import { Html } from "@react-email/html";
import { Preview } from "@react-email/preview";
import { Row } from "@react-email/row";
import { Section } from "@react-email/section";
import { Text } from "@react-email/text";
import type { CSSProperties, ReactNode } from "react";

export type Niveau = "ok" | "let-op" | "actie";

const FONT = "-apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";

const KLEUR: Record<Niveau, { rand: string; achtergrond: string; tekst: string }> = {
  ok: { rand: "#16a34a", achtergrond: "#f0fdf4", tekst: "#14532d" },
  "let-op": { rand: "#d97706", achtergrond: "#fffbeb", tekst: "#78350f" },
  actie: { rand: "#dc2626", achtergrond: "#fef2f2", tekst: "#7f1d1d" },
};

export function Layout(props: {
  /** The line mail clients show beside the subject. */
  preview: string;
  /** Small line above the title in the header, e.g. "Dagrapport". */
  soort: string;
  titel: string;
  /** Shown in the footer: the time zone of every time in the message. */
  tijdzone: string;
  children: ReactNode;
}) {
  return (
    <Html lang="nl">
      <Head />
      <Preview>{props.preview}</Preview>
      <Body style={{ backgroundColor: "#eef0f3", fontFamily: FONT, margin: 0, padding: "24px 0" }}>
        <Container style={{ maxWidth: "640px", width: "100%", margin: "0 auto" }}>
          <Section style={{ backgroundColor: "#0f172a", borderRadius: "8px 8px 0 0", padding: "20px 28px" }}>
            <Text style={{ color: "#94a3b8", fontSize: "12px", letterSpacing: "0.08em", margin: 0, textTransform: "uppercase" }}>
              nachtwacht · {props.soort}
            </Text>
            <Heading as="h1" style={{ color: "#ffffff", fontSize: "22px", lineHeight: "28px", margin: "6px 0 0", fontWeight: 600 }}>
              {props.titel}
            </Heading>
          </Section>
          <Section style={{ backgroundColor: "#ffffff", borderRadius: "0 0 8px 8px", padding: "8px 28px 24px" }}>{props.children}</Section>
          <Text style={{ color: "#6b7280", fontSize: "12px", lineHeight: "18px", margin: "16px 28px 0", textAlign: "center" }}>
            Automatisch verstuurd door nachtwacht. Alle tijden in {props.tijdzone}.
          </Text>
        </Container>
      </Body>
    </Html>
  );
}

/** The headline: in order or not, and why. */
export function StatusBanner(props: { niveau: Niveau; kop: string; punten?: string[]; /** Small line above the headline, e.g. "Status van week 30". */ label: string }) {
  const k = KLEUR[props.niveau];
  return (
    <Section
      style={{
        backgroundColor: k.achtergrond,
        borderLeft: `4px solid ${k.rand}`,
        borderRadius: "4px",
        margin: "20px 0 8px",
        padding: "12px 16px",
      }}
    >
      <Text style={{ color: k.rand, fontSize: "11px", fontWeight: 700, letterSpacing: "0.08em", margin: 0, textTransform: "uppercase" }}>{props.label}</Text>
      <Text style={{ color: k.tekst, fontSize: "17px", fontWeight: 600, lineHeight: "24px", margin: "2px 0 0" }}>{props.kop}</Text>
      {props.punten && props.punten.length > 0 ? (
        <ul style={{ color: k.tekst, fontSize: "14px", lineHeight: "21px", margin: "8px 0 0", paddingLeft: "20px" }}>
          {props.punten.map((p, i) => (
            <li key={i}>{p}</li>
          ))}
        </ul>
      ) : null}
    </Section>
  );
}

export interface Kengetal {
  waarde: string;
  label: string;
  /** Marks a figure that needs attention. */
  niveau?: Niveau;
}

/** A row of large numbers with a label under each. */
export function Kengetallen(props: { items: Kengetal[] }) {
  const width = `${Math.floor(100 / Math.max(1, props.items.length))}%`;
  return (
    <>
      {/* The boxes read badly as text; the text part gets one line per figure instead. */}
      <div style={{ display: "none", maxHeight: 0, overflow: "hidden" }}>
        {props.items.map((item, i) => (
          <p key={i}>
            {item.label.charAt(0).toUpperCase() + item.label.slice(1)}: {item.waarde}
          </p>
        ))}
      </div>
      <Section style={{ margin: "16px 0 4px" }} data-skip-in-text="true">
      <Row>
        {props.items.map((item, i) => (
          <Column
            key={i}
            style={{
              width,
              padding: i === 0 ? "0 4px 0 0" : i === props.items.length - 1 ? "0 0 0 4px" : "0 4px",
              verticalAlign: "top",
            }}
          >
            <div style={{ border: "1px solid #e5e7eb", borderRadius: "6px", padding: "10px 12px", backgroundColor: "#f9fafb", minHeight: "62px" }}>
              <Text
                style={{
                  color: item.niveau && item.niveau !== "ok" ? KLEUR[item.niveau].rand : "#111827",
                  fontSize: "22px",
                  fontWeight: 700,
                  lineHeight: "28px",
                  margin: 0,
                }}
              >
                {item.waarde}
              </Text>
              <Text style={{ color: "#4b5563", fontSize: "12px", lineHeight: "16px", margin: "2px 0 0" }}>{item.label}</Text>
            </div>
          </Column>
        ))}
      </Row>
      </Section>
    </>
  );
}

export function Kop(props: { children: ReactNode }) {
  return (
    <Heading
      as="h2"
      style={{
        color: "#111827",
        fontSize: "15px",
        fontWeight: 700,
        lineHeight: "20px",
        margin: "28px 0 8px",
        paddingBottom: "6px",
        borderBottom: "1px solid #e5e7eb",
      }}
    >
      {props.children}
    </Heading>
  );
}

export function Alinea(props: { children: ReactNode; gedempt?: boolean }) {
  return (
    <Text style={{ color: props.gedempt ? "#6b7280" : "#1f2937", fontSize: "14px", lineHeight: "21px", margin: "14px 0 8px" }}>
      {props.children}
    </Text>
  );
}

export interface Kolom {
  kop: string;
  /** Numbers are right-aligned. */
  rechts?: boolean;
  /** Keep on one line (dates, names). */
  nowrap?: boolean;
}

const cell: CSSProperties = { padding: "7px 8px", fontSize: "13px", lineHeight: "18px", borderBottom: "1px solid #f0f1f3", color: "#1f2937" };

/** A table of facts; in the text part it stays a table. */
export function Tabel(props: { kolommen: Kolom[]; rijen: ReactNode[][]; leeg?: string }) {
  if (props.rijen.length === 0 && props.leeg) return <Alinea gedempt>{props.leeg}</Alinea>;
  return (
    <table data-text-format="dataTable" width="100%" cellPadding={0} cellSpacing={0} role="presentation" style={{ borderCollapse: "collapse", width: "100%" }}>
      <thead>
        <tr>
          {props.kolommen.map((k, i) => (
            <th
              key={i}
              style={{
                ...cell,
                backgroundColor: "#f3f4f6",
                color: "#374151",
                fontSize: "12px",
                fontWeight: 600,
                textAlign: k.rechts ? "right" : "left",
                borderBottom: "1px solid #e5e7eb",
              }}
            >
              {k.kop}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {props.rijen.map((rij, r) => (
          <tr key={r}>
            {rij.map((waarde, i) => (
              <td
                key={i}
                style={{
                  ...cell,
                  textAlign: props.kolommen[i]?.rechts ? "right" : "left",
                  whiteSpace: props.kolommen[i]?.nowrap ? "nowrap" : undefined,
                  fontVariantNumeric: "tabular-nums",
                }}
              >
                {waarde}
              </td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Label and value rows without a header (also a table in the text part). */
export function Feiten(props: { rijen: [string, ReactNode][] }) {
  return (
    <table data-text-format="dataTable" width="100%" cellPadding={0} cellSpacing={0} role="presentation" style={{ borderCollapse: "collapse", width: "100%" }}>
      <tbody>
        {props.rijen.map(([label, waarde], r) => (
          <tr key={r}>
            <td style={{ ...cell, color: "#4b5563", width: "42%" }}>{label}</td>
            <td style={{ ...cell, fontWeight: 500 }}>{waarde}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

const MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace";

/**
 * Text to be kept or copied exactly (a signed note, a key): monospace, every line and
 * character as given. A <pre>, so the text part keeps the lines too; long lines wrap
 * on screen only.
 */
export function Codeblok(props: { children: string }) {
  return (
    <pre
      style={{
        backgroundColor: "#f3f4f6",
        border: "1px solid #e5e7eb",
        borderRadius: "4px",
        color: "#111827",
        fontFamily: MONO,
        fontSize: "12px",
        lineHeight: "18px",
        margin: "8px 0",
        padding: "10px 12px",
        whiteSpace: "pre-wrap",
        wordBreak: "break-all",
      }}
    >
      {props.children}
    </pre>
  );
}

/** A command or name inside a sentence. */
export function Code(props: { children: ReactNode }) {
  return <code style={{ fontFamily: MONO, fontSize: "13px" }}>{props.children}</code>;
}

/** A small colored word for a state inside a table or sentence. */
export function Label(props: { niveau: Niveau; children: ReactNode }) {
  const k = KLEUR[props.niveau];
  return (
    <span style={{ color: k.rand, fontWeight: 600 }}>
      {props.children}
    </span>
  );
}

export function Scheiding() {
  return <Hr style={{ borderColor: "#e5e7eb", margin: "24px 0 8px" }} />;
}
