// `nachtwacht config check [--env FILE]`: validates the configuration without starting
// the service, and names every bad variable in one run (the start names only the first).
// Without --env it checks the environment it runs in. Values are never printed: the
// file holds the secret and the signing key.
//
// A configuration in order is also held against the marker zegelsleutel beside the anchor
// file, as the start does (keyChange): a key change that left the old key out of
// AUDIT_VERTROUWDE_SLEUTELS is named here, not by a refused restart. With --env the anchor
// file is where the service under ops/nachtwacht.service finds it (its working directory
// and default are /var/lib/nachtwacht's), not where the command runs.
//
// Exit codes: 0 in order, 1 one or more variables wrong (or a signing key the start
// would refuse), 2 the check could not run (unreadable file or marker, a line that is no
// KEY=VALUE, unknown option).
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { generateKeyPair } from "../audit/note.ts";
import { ConfigError, parseConfig, type Config } from "../config.ts";
import { keyChange, rowSealOf, sealKeyMarker, UntrustedSealKey } from "../row-seal.ts";
import { parseOptions } from "./options.ts";

const USAGE =
  "gebruik: nachtwacht config check [--env BESTAND]\n" +
  "  Controleert de configuratie zonder te starten en noemt elke foute variabele (nooit een waarde).\n" +
  "  --env  een omgevingsbestand (KEY=VALUE per regel, zoals /etc/nachtwacht/nachtwacht.env);\n" +
  "         zonder --env de omgeving waarin het commando draait.\n" +
  "  Exitcode: 0 in orde, 1 fouten gevonden, 2 kon niet controleren.";

/** A line of an environment file that is no KEY=VALUE: named by its number, never shown. */
export class EnvFileError extends Error {}

/**
 * systemd EnvironmentFile lines as ops/nachtwacht-call.sh reads them: KEY=VALUE, the value
 * optionally in matching quotes; blank lines and lines starting with # or ; are skipped.
 */
export function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trimStart();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) return;
    const eq = line.indexOf("=");
    const key = eq < 0 ? "" : line.slice(0, eq).trimEnd();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new EnvFileError(`regel ${i + 1} is geen KEY=VALUE`);
    let value = line.slice(eq + 1);
    if (value.length >= 2 && (value[0] === '"' || value[0] === "'") && value.endsWith(value[0]!)) value = value.slice(1, -1);
    env[key] = value;
  });
  return env;
}

/**
 * Every configuration error, not only the first: after each error the variable gets a
 * stand-in (a valid placeholder for the two required ones and for a secret whose _VORIG
 * is checked against it, its default for the rest) and parsing goes on.
 */
export function allConfigErrors(env: Record<string, string | undefined>): ConfigError[] {
  const trial: Record<string, string | undefined> = { ...env };
  const errors: ConfigError[] = [];
  const standIn: Record<string, () => string> = {
    CRON_SECRET: () => "0".repeat(64),
    AUDIT_ANKER_SLEUTEL: () => generateKeyPair("config.check/plaatsvervanger").signerKey,
    // Set but invalid is not unset: removed, its _VORIG would be reported as "set without"
    // it, which is false. Random, so the stand-in equals no secret the file holds.
    APP_SECRET: () => randomBytes(32).toString("hex"),
    METRICS_SECRET: () => randomBytes(32).toString("hex"),
  };
  for (;;) {
    try {
      parseConfig(trial);
      return errors;
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      // A stand-in that fails again would loop: report and stop.
      if (errors.some((x) => x.variable === e.variable)) return errors;
      errors.push(e);
      trial[e.variable] = standIn[e.variable]?.();
      if (trial[e.variable] === undefined) delete trial[e.variable];
    }
  }
}

export function runConfigCheck(argv: string[], env: Record<string, string | undefined>, out: (s: string) => void, err: (s: string) => void): number {
  let values;
  try {
    values = parseOptions("nachtwacht config check", argv, { env: { type: "string" }, help: { type: "boolean", short: "h" } });
  } catch (e) {
    err(`nachtwacht config check: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    out(USAGE);
    return 0;
  }
  let checked: Record<string, string | undefined> = env;
  if (values.env !== undefined) {
    try {
      checked = parseEnvFile(readFileSync(values.env, "utf8"));
    } catch (e) {
      const why = e instanceof EnvFileError ? e.message : `niet leesbaar (${(e as NodeJS.ErrnoException).code ?? "fout"})`;
      err(`nachtwacht config check: ${values.env}: ${why}`);
      return 2;
    }
  }
  const errors: string[] = allConfigErrors(checked).map((e) => e.message);
  const where = values.env ?? "de omgeving";
  let marker = "";
  if (errors.length === 0) {
    const config = parseConfig(checked);
    // An env file is the unit's: its anchor file where the service finds it (asService).
    if (values.env !== undefined) config.auditAnkerBestand = asService(checked.AUDIT_ANKER_BESTAND);
    marker = sealKeyMarker(config);
    try {
      const refused = sealKeyRefusal(config);
      if (refused !== null) errors.push(`zegelsleutel: ${refused}`);
    } catch (e) {
      err(`nachtwacht config check: ${marker} niet leesbaar (${(e as NodeJS.ErrnoException).code ?? "fout"})`);
      return 2;
    }
  }
  if (errors.length === 0) {
    out(`in orde: ${where}`);
    out(existsSync(marker) ? `zegelsleutel: ${marker} noemt een sleutel die deze configuratie vertrouwt` : `zegelsleutel: ${marker} bestaat niet (nog geen start met deze map), niet gecontroleerd`);
    return 0;
  }
  for (const e of errors) out(e);
  out(`${errors.length} ${errors.length === 1 ? "fout" : "fouten"} in ${where}`);
  return 1;
}

/** Where the unit (ops/nachtwacht.service) runs the service: its WorkingDirectory, and its AUDIT_ANKER_BESTAND when the env file sets none. */
const SERVICE_DIR = "/var/lib/nachtwacht";

/** AUDIT_ANKER_BESTAND of an env file as the service under the unit reads it: unset, the unit's; relative, from the unit's working directory. */
function asService(anchorFile: string | undefined): string {
  return resolve(SERVICE_DIR, anchorFile?.trim() || "audit-ankers.jsonl");
}

/** Why the start would refuse this configuration over zegelsleutel (UntrustedSealKey), or null; only reads the marker. */
function sealKeyRefusal(config: Config): string | null {
  try {
    keyChange(sealKeyMarker(config), rowSealOf(config));
    return null;
  } catch (e) {
    if (e instanceof UntrustedSealKey) return e.message;
    throw e;
  }
}
