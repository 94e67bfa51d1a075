// The audit keys from the configuration: the signer (AUDIT_ANKER_SLEUTEL) and every
// trusted verifier key (its own, plus AUDIT_VERTROUWDE_SLEUTELS after a key change).
import type { Config } from "../config.ts";
import { parseSignerKey, parseVerifierKey } from "./note.ts";
import type { Keys } from "./records.ts";

export function auditKeys(config: Pick<Config, "auditAnkerSleutel" | "auditVertrouwdeSleutels">): Keys {
  const signer = parseSignerKey(config.auditAnkerSleutel);
  // Compared as parsed (canonical, parseVerifierKey): the signer's own key written with an upper-case key ID is the same key, once.
  const trusted = config.auditVertrouwdeSleutels.map(parseVerifierKey).filter((v) => v.verifierKey !== signer.verifierKey);
  return { signer, verifiers: [parseVerifierKey(signer.verifierKey), ...trusted] };
}

/** AUDIT_VERTROUWDE_SLEUTELS as a list: public keys separated by commas or white space. */
export function keyList(text: string | undefined): string[] {
  return (text ?? "").split(/[\s,]+/).filter((k) => k !== "");
}
