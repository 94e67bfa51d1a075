// What the reports share: the status levels and the plain-language reasons of a
// broken chain (the `reden` codes of audit-verificatie, contract §3).
export type { Niveau } from "../../emails/layout.tsx";

const REDEN: Record<string, string> = {
  "hash-afwijkend": "een entry is na het schrijven gewijzigd (de hash klopt niet meer)",
  "koppeling-verbroken": "een entry verwijst niet naar de entry ervoor (koppeling verbroken)",
  "volgnummer-gat": "er ontbreken entries midden in de keten (gat in de volgnummers)",
  "anker-afwijkend": "het begin van de keten sluit niet aan op het retentie-anker",
  "kop-ontbreekt": "een vastgelegde kop van de keten is verdwenen of gewijzigd (entries afgeknipt of herschreven)",
};

/** A Dutch explanation of a verification `reden` code. */
export function redenUitleg(reden: string | null): string {
  if (reden === null) return "reden onbekend";
  return REDEN[reden] ?? reden;
}
