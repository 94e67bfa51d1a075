// Whether what listens on the service's port may be handed CRON_SECRET: the rule of
// check_listener in ops/env-file.sh (the call script's), here for the binary's commands
// that call the service (`nachtwacht backup`'s report).
//
// The port is unprivileged: while the service is down (a restart, an upgrade, the boot)
// any local user can bind it, keep it (the service then fails to start), and collect the
// secret from the next call; with it they could report a backup that never ran. So every
// socket listening on the port, IPv4 and IPv6, must belong to the service's user (the
// owner of the anchor file it writes; before that exists, of its directory) or to root
// (docker-proxy, a service run as root; root can read the environment file anyway).
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";

/** The uid of each socket listening on TCP `port` on this host, from /proc/net/tcp and tcp6 (empty where they are absent). */
export function listenerUids(port: number): number[] {
  const want = port.toString(16).toUpperCase().padStart(4, "0");
  const uids: number[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue; // no IPv6 on this host
    }
    // Columns: sl local_address(hexip:HEXPORT) rem_address st(0A = LISTEN) … uid(8th).
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 8 || f[3] !== "0A" || f[1]!.split(":").at(-1) !== want) continue;
      uids.push(Number(f[7]));
    }
  }
  return uids;
}

/**
 * Null when every listener on `port` is root's or the owner's of `anchorFile` (else of its
 * directory), also when nothing listens (the call then fails to connect); otherwise the
 * Dutch reason to send nothing, naming the port and both uids, never the secret.
 */
export function listenerRefusal(port: number, anchorFile: string): string | null {
  const owner = existsSync(anchorFile) ? anchorFile : dirname(anchorFile);
  let expected: number | null = null;
  try {
    expected = statSync(owner).uid;
  } catch {
    // neither exists: only root is the service's for certain
  }
  const other = listenerUids(port).find((uid) => uid !== 0 && uid !== expected);
  if (other === undefined) return null;
  return `poort ${port} is in gebruik door uid ${other}, niet door de dienst (verwacht uid ${expected ?? "onbekend"}, eigenaar van ${owner}, of root): CRON_SECRET niet verstuurd`;
}
