// A local SMTP sink in its own process (so its CPU and memory are not the job's):
// accepts every message and discards it. Prints its port; on SIGTERM the count.
//
//   bun bench/smtp-sink.ts
import { SMTPServer } from "smtp-server";

let received = 0;
let bytes = 0;
const server = new SMTPServer({
  authOptional: true,
  // without it every connection waits on a reverse DNS lookup
  disableReverseLookup: true,
  hideSTARTTLS: true,
  logger: false,
  onData(stream, _session, callback) {
    stream.on("data", (c: Buffer) => (bytes += c.length));
    stream.on("end", () => {
      received++;
      callback();
    });
  },
});
server.listen(0, "127.0.0.1", () => {
  const a = server.server.address();
  console.log(JSON.stringify({ port: typeof a === "object" && a ? a.port : 0 }));
});
process.on("SIGTERM", () => {
  console.log(JSON.stringify({ received, bytes }));
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 500);
});
