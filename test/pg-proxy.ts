// A TCP proxy between the service and a real PostgreSQL server that cuts a connection
// at a chosen moment of a transaction's end, as a network failure or a crashed router
// would: `before` drops the connection carrying a COMMIT without passing it on (the
// server never commits: the backend sees its client gone while idle in transaction and
// rolls back); `after` passes the COMMIT on and drops the connection as the server's
// answer arrives (the server committed; the client never hears so). With `down`, every
// other connection is cut with it and every later one refused, so nothing can ask the
// server afterwards. `retarget` sends later connections to another server, as a failover
// that moves the service's host name to a promoted standby would.
import { connect, createServer, type Server, type Socket } from "node:net";

export type CutMode = "before" | "after";

export interface PgProxy {
  /** `url` with its host and port replaced by the proxy's. */
  url: string;
  /** The next connection that sends COMMIT is cut `mode`; resolves when it was. */
  cutNextCommit(mode: CutMode, o?: { down?: boolean }): Promise<void>;
  /** Lets connections through again after a `down` cut. */
  up(): void;
  /** Later connections go to the server of `url` (its host and port). */
  retarget(url: string): void;
  /** How many connections went to the server of `url`. */
  connectionsTo(url: string): number;
  close(): Promise<void>;
}

export async function startPgProxy(url: string): Promise<PgProxy> {
  let target = new URL(url);
  let armed: { mode: CutMode; down: boolean; done: () => void } | null = null;
  let down = false;
  const sockets = new Set<Socket>();
  const opened = new Map<string, number>();
  const hostPort = (u: URL) => `${u.hostname}:${u.port}`;
  const server: Server = createServer((client) => {
    if (down) return void client.destroy();
    const upstream = connect(Number(target.port), target.hostname);
    opened.set(hostPort(target), (opened.get(hostPort(target)) ?? 0) + 1);
    sockets.add(client).add(upstream);
    let cutOnAnswer: (() => void) | null = null;
    const cut = (thenDown: boolean) => {
      down = thenDown;
      for (const s of thenDown ? [...sockets] : [client, upstream]) s.destroy();
    };
    client.on("data", (d: Buffer) => {
      // The statement itself, NUL-terminated in the protocol: not BEGIN … READ COMMITTED.
      if (armed !== null && d.includes("COMMIT\0")) {
        const { mode, down: thenDown, done } = armed;
        armed = null;
        if (mode === "before") {
          cut(thenDown);
          return done();
        }
        cutOnAnswer = () => {
          cut(thenDown);
          done();
        };
      }
      upstream.write(d);
    });
    upstream.on("data", (d: Buffer) => {
      if (cutOnAnswer !== null) return cutOnAnswer();
      client.write(d);
    });
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      a.on("close", () => {
        sockets.delete(a);
        b.destroy();
      });
      a.on("error", () => b.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const proxied = new URL(url);
  proxied.hostname = "127.0.0.1";
  proxied.port = String(port);
  return {
    url: proxied.toString(),
    cutNextCommit: (mode, o = {}) => new Promise<void>((done) => (armed = { mode, down: o.down ?? false, done })),
    up: () => void (down = false),
    retarget: (to) => void (target = new URL(to)),
    connectionsTo: (url) => opened.get(hostPort(new URL(url))) ?? 0,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
