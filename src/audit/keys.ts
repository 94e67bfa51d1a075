// The audit keys from the configuration: the signer (AUDIT_ANKER_SLEUTEL) and every
// trusted verifier key (its own, plus AUDIT_VERTROUWDE_SLEUTELS after a key change).
import type { Config } from "../config.ts";
import { parseSignerKey, parseVerifierKey } from "./note.ts";
import type { Keys } from "./records.ts";

export function auditKeys(config: Pick<Config, "auditAnkerSleutel" | "auditVertrouwdeSleutels">): Keys {
  const signer = parseSignerKey(config.auditAnkerSleutel);
  const vkeys = [signer.verifierKey, ...config.auditVertrouwdeSleutels.filter((k) => k !== signer.verifierKey)];
  return { signer, verifiers: vkeys.map(parseVerifierKey) };
}

/** AUDIT_VERTROUWDE_SLEUTELS as a list: public keys separated by commas or white space. */
export function keyList(text: string | undefined): string[] {
  return (text ?? "").split(/[\s,]+/).filter((k) => k !== "");
}
