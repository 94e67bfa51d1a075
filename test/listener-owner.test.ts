// The secret goes only to the service: ops/nachtwacht-call.sh (check_listener in
// ops/env-file.sh) and `nachtwacht backup`'s report (listenerRefusal in
// src/cli/listener.ts) send nothing to a port held by another user than the service's
// (the anchor file's owner) or root. A real listener as another uid (as root: `nobody`
// through setpriv; otherwise the test's own uid, which is not root's either) records
// every request it gets; the anchor's directory is root's, so that listener is not the
// service's. Whether it got a request is read from its own output, up to a probe the test
// sends after the caller has exited: the callers' requests would have come before it.
import { afterEach, describe, expect, test } from "bun:test";
import { chownSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runBackup } from "../src/cli/backup.ts";
import { listenerRefusal, listenerUids } from "../src/cli/listener.ts";
import { openStore } from "../src/db.ts";
import { ROOT } from "./binary.ts";
import { tempDir } from "./helpers.ts";

const CALL = join(ROOT, "ops", "nachtwacht-call.sh");
const SECRET = "port-" + "7e".repeat(30);
const asRoot = process.getuid!() === 0;
/** The listener's uid: not root's, and not the owner of ROOT_OWNED_ANCHOR's directory. */
const OTHER_UID = asRoot ? 65534 : process.getuid!();
/** An anchor file that does not exist, in a directory root owns: the expected uid is 0. */
const ROOT_OWNED_ANCHOR = "/nachtwacht-test-geen-ankers.jsonl";
const PYTHON = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";

// Prints its port, then one JSON line per request: the path and the Authorization header.
const SERVER = `
import http.server, json, socket, sys
class S(http.server.HTTPServer):
    address_family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        print(json.dumps({"path": self.path, "authorization": self.headers.get("authorization")}), flush=True)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok":true,"gelukt":true}')
    do_GET = do_POST = answer
    def log_message(self, *a): pass
s = S((sys.argv[1], 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
`;

interface Listener {
  port: number;
  /** The Authorization headers of the requests before the probe (null: none sent). */
  received(): Promise<(string | null)[]>;
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function listen(host: string): Promise<Listener> {
  const cmd = [PYTHON, "-c", SERVER, host];
  const proc = Bun.spawn(asRoot ? ["setpriv", `--reuid=${OTHER_UID}`, `--regid=${OTHER_UID}`, "--clear-groups", ...cmd] : cmd, { cwd: "/", stdout: "pipe", stderr: "inherit" });
  cleanups.push(async () => {
    proc.kill("SIGKILL");
    await proc.exited;
  });
  const reader = proc.stdout.getReader();
  let buffered = "";
  const line = async (): Promise<string> => {
    for (;;) {
      const nl = buffered.indexOf("\n");
      if (nl >= 0) {
        const l = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        return l;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error(`listener ended; output so far: ${buffered}`);
      buffered += new TextDecoder().decode(value);
    }
  };
  const port = Number(await line());
  return {
    port,
    async received() {
      const probe = `/probe-${Math.random().toString(36).slice(2)}`;
      await (await fetch(`http://${host.includes(":") ? "[::1]" : "127.0.0.1"}:${port}${probe}`)).text();
      const seen: (string | null)[] = [];
      for (;;) {
        const r = JSON.parse(await line()) as { path: string; authorization: string | null };
        if (r.path === probe) return seen;
        seen.push(r.authorization);
      }
    },
  };
}

function work(port: number, anchor: string) {
  const { dir, cleanup } = tempDir("nachtwacht-listener-");
  cleanups.push(cleanup);
  const env = join(dir, "nachtwacht.env");
  writeFileSync(env, `CRON_SECRET=${SECRET}\nPORT=${port}\nHOST=127.0.0.1\nAUDIT_ANKER_BESTAND=${anchor}\n`, { mode: 0o600 });
  const db = join(dir, "nachtwacht.db");
  openStore(db).close();
  return { dir, env, db };
}

async function call(env: string) {
  const p = Bun.spawn(["bash", CALL, "backup-status", "30", '{"exitCode":0}'], { env: { PATH: "/usr/local/bin:/usr/bin:/bin", NACHTWACHT_LOG: "stdout", NACHTWACHT_ENV: env }, stdout: "pipe", stderr: "pipe" });
  const [code, out, err] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, out: out + err };
}

async function backup(w: { dir: string; env: string; db: string }, anchor: string) {
  const said: string[] = [];
  const code = await runBackup(["--env", w.env, "--db", w.db, "--map", join(w.dir, "backups"), "--ankers", anchor], {}, (s) => said.push(s), (s) => said.push(s));
  return { code, out: said.join("\n"), backups: readdirSync(join(w.dir, "backups")).filter((f) => f.endsWith(".db.gz")) };
}

describe.each([["IPv4", "127.0.0.1"], ["IPv6 (dual-stack ::)", "::"]])("a port held by another user (%s)", (_, host) => {
  test("nachtwacht-call.sh sends no secret: exit 77 and one line naming the port and both uids", async () => {
    const l = await listen(host);
    expect(listenerUids(l.port)).toEqual([OTHER_UID]);
    const r = await call(work(l.port, ROOT_OWNED_ANCHOR).env);
    expect(await l.received()).toEqual([]);
    expect(r.code).toBe(77);
    expect(r.out.trim()).toBe(
      `nachtwacht-call: backup-status niet aangeroepen: poort ${l.port} is in gebruik door uid ${OTHER_UID}, niet door de dienst (verwacht uid 0, eigenaar van /, of root): CRON_SECRET niet verstuurd`,
    );
    expect(r.out).not.toContain(SECRET);
  });

  test("a PORT written with a leading zero is the same port to the check as to curl (not read as octal): refused", async () => {
    const l = await listen(host);
    const w = work(l.port, ROOT_OWNED_ANCHOR);
    writeFileSync(w.env, readFileSync(w.env, "utf8").replace(`PORT=${l.port}`, `PORT=0${l.port}`));
    const r = await call(w.env);
    expect(await l.received()).toEqual([]);
    expect(r.code).toBe(77);
    expect(r.out).toContain(`poort ${l.port} is in gebruik door uid ${OTHER_UID}`);
  });

  test("nachtwacht backup keeps its backup, sends no secret, and exits 75 (made, not reported)", async () => {
    const l = await listen(host);
    const w = work(l.port, ROOT_OWNED_ANCHOR);
    const r = await backup(w, ROOT_OWNED_ANCHOR);
    expect(await l.received()).toEqual([]);
    expect(r.code).toBe(75);
    expect(r.backups).toHaveLength(1);
    expect(r.out).toContain(`backup-status niet gemeld: poort ${l.port} is in gebruik door uid ${OTHER_UID}, niet door de dienst (verwacht uid 0, eigenaar van /, of root): CRON_SECRET niet verstuurd`);
    expect(r.out).not.toContain(SECRET);
  });
});

describe("a port held by the anchor file's owner (the service's user)", () => {
  test("both callers send the secret: the call exits 0, the backup reports and exits 0", async () => {
    const l = await listen("127.0.0.1");
    const { dir, cleanup } = tempDir("nachtwacht-anchor-");
    cleanups.push(cleanup);
    const anchor = join(dir, "audit-ankers.jsonl");
    // Before the service has written it: its directory's owner is the service's user.
    chownSync(dir, OTHER_UID, OTHER_UID);
    expect(listenerRefusal(l.port, anchor)).toBeNull();
    const w = work(l.port, anchor);
    expect((await call(w.env)).code).toBe(0);
    expect(await l.received()).toEqual([`Bearer ${SECRET}`]);
    writeFileSync(anchor, "");
    chownSync(anchor, OTHER_UID, OTHER_UID);
    chownSync(dir, 0, 0);
    const r = await backup(w, anchor);
    expect(await l.received()).toEqual([`Bearer ${SECRET}`]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("backup-status: HTTP 200");
  });
});
