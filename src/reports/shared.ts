// What the reports share: the status levels and the plain-language reasons of a
// broken chain or anchor file (the `reden` codes of audit-verificatie, docs/audit-chain.md).
import type { FileReason, RowReason } from "../audit/anchor-check.ts";
import type { BreakReason } from "../audit/verify.ts";
import type { Niveau } from "../../emails/layout.tsx";
export type { Niveau };

/** Every code the verifier reports (the type makes a new code without explanation a compile error). */
const REDEN: Record<BreakReason | RowReason | FileReason, string> = {
  // A tenant's chain (src/audit/verify.ts).
  "hash-afwijkend": "een entry is na het schrijven gewijzigd (de hash klopt niet meer)",
  "koppeling-verbroken": "een entry verwijst niet naar de entry ervoor (koppeling verbroken)",
  "volgnummer-gat": "er ontbreken entries midden in de keten (gat in de volgnummers)",
  "anker-afwijkend":
    "de oudste overgebleven entry sluit niet aan op het begin van de keten of op het ondertekende retentierecord waar de keten na opschonen begint",
  "kop-ontbreekt": "de keten houdt op vóór het nieuwste ondertekende checkpoint: de nieuwste entries zijn verwijderd of de database is teruggezet",
  "checkpoint-afwijkend":
    "de herberekende Merkle-root wijkt af van het ondertekende checkpoint: entries zijn gewijzigd en de keten is opnieuw doorgerekend",
  "retentie-ontbreekt": "oudere entries zijn verdwenen zonder ondertekend retentierecord",
  "retentie-ongeldig": "het retentierecord is niet geldig ondertekend of rechtvaardigt de verwijdering niet",
  // A tenant's rows in the database copy of the anchor file (src/audit/anchor-check.ts).
  "checkpoint-ontbreekt": "een record uit het ankerbestand ontbreekt in de kopie in de database",
  "checkpoint-niet-in-bestand": "een checkpoint in de database staat niet in het ankerbestand: gewijzigd of vervalst",
  // The anchor file as a whole.
  "bestand-ontbreekt": "het ankerbestand ontbreekt, terwijl de database ernaar verwijst",
  "bestand-ingekort": "het ankerbestand is ingekort: de database verwijst naar regels voorbij het einde",
  "bestand-gewijzigd": "het ankerbestand is gewijzigd: een regel wijkt af van de database of is niet geldig ondertekend",
  "database-teruggezet": "de database is teruggezet: het ankerbestand bevat runs die de database niet kent",
};

/** A Dutch explanation of a verification `reden` code. */
export function redenUitleg(reden: string | null): string {
  if (reden === null) return "reden onbekend";
  return Object.hasOwn(REDEN, reden) ? REDEN[reden as keyof typeof REDEN] : reden;
}

const RANK: Record<Niveau, number> = { ok: 0, "let-op": 1, actie: 2 };

/** The worse of two levels: a report's status is the worst level among its points. */
function worstLevel(a: Niveau, b: Niveau): Niveau {
  return RANK[b] > RANK[a] ? b : a;
}

/** The status headline of a level; `actie` may name the cause. */
function statusHeadline(niveau: Niveau, actie = "Actie nodig"): string {
  return niveau === "ok" ? "Alles in orde" : niveau === "actie" ? actie : "Aandacht nodig";
}

/** A point of a report's status: how serious it is, and what it says. */
export type StatusPunt = [Niveau, string];

/** A report's status: the worst level among its points (ok without any), its headline and the points' texts. */
export function reportStatus(punten: StatusPunt[], actie?: string): { niveau: Niveau; kop: string; punten: string[] } {
  const niveau = punten.reduce<Niveau>((worst, [n]) => worstLevel(worst, n), "ok");
  return { niveau, kop: statusHeadline(niveau, actie), punten: punten.map(([, tekst]) => tekst) };
}
