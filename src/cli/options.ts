// The one rule for every operator command's options (the binary's commands, backup, config check,
// db-convert, migrate-to, demo-data): each command parses its own table,
// and what it does not take is refused, never ignored. An option of another command
// (`accept-restore --tenant 2` would otherwise act on every tenant), a single-valued
// option given twice (which one is meant is not for the command to guess), a value
// missing or given to a switch, an argument without an option: each an OptionError
// naming it in Dutch, which the command reports as a usage error (exit 2).
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";

export class OptionError extends Error {}

/** `args` parsed against `options` (strict); `command` as named in the message, e.g. "nachtwacht verify". */
export function parseOptions<T extends ParseArgsOptionsConfig>(command: string, args: string[], options: T) {
  const { tokens } = parseArgs({ args, options, strict: false, allowPositionals: true, tokens: true });
  const seen = new Set<string>();
  for (const t of tokens) {
    if (t.kind === "positional") throw new OptionError(`${command} neemt geen argument ${JSON.stringify(t.value)} (alleen opties)`);
    if (t.kind !== "option") continue;
    const spec = options[t.name];
    if (spec === undefined) throw new OptionError(`${t.rawName} is geen optie van ${command}`);
    const name = `--${t.name}`;
    if (!spec.multiple) {
      if (seen.has(t.name)) throw new OptionError(`${name} is meer dan eens gegeven: geef het één keer`);
      seen.add(t.name);
    }
    if (spec.type === "boolean" && t.value !== undefined) throw new OptionError(`${name} neemt geen waarde`);
    if (spec.type === "string" && (t.value === undefined || (!t.inlineValue && t.value.length > 1 && t.value.startsWith("-")))) {
      throw new OptionError(`${name} heeft een waarde nodig${t.value === undefined ? "" : ` (niet ${t.value}; een waarde die met '-' begint als ${name}=…)`}`);
    }
  }
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (e) {
    throw new OptionError(e instanceof Error ? e.message : String(e));
  }
}
