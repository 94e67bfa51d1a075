// A hand-written SMTP server whose answer to a message's final "." is chosen per
// message: "accept" (250), "refuse" (451, a temporary refusal) or "drop" (the whole
// message was received, then the connection is closed without an answer: the "250
// never came" case, where the message may well be delivered). Every message whose final
// "." arrived is listed in `full`, with its recipient, subject and the answer it got.
// The tests of a send whose outcome is unknown need it: smtp-server (test/smtp.ts)
// always answers.
import net from "node:net";

export type FinalAnswer = "accept" | "refuse" | "drop";

export interface CtlSmtp {
  /** `smtp://127.0.0.1:<port>` */
  url: string;
  /** The answer to the next final "."; may be changed between messages. */
  mode: FinalAnswer;
  full: { to: string; subject: string; answer: FinalAnswer }[];
  stop(): Promise<void>;
}

export async function ctlSmtp(mode: FinalAnswer = "accept"): Promise<CtlSmtp> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.on("close", () => sockets.delete(sock));
    sock.on("error", () => {});
    let buf = "";
    let inData = false;
    let data = "";
    let rcpt = "";
    sock.write("220 ctl ESMTP\r\n");
    sock.on("data", (chunk) => {
      buf += chunk.toString("latin1");
      for (;;) {
        if (inData) {
          const end = buf.indexOf("\r\n.\r\n");
          if (end < 0) {
            // Keep the last bytes: the terminator may be split over two chunks.
            data += buf.slice(0, Math.max(0, buf.length - 4));
            buf = buf.slice(Math.max(0, buf.length - 4));
            return;
          }
          data += buf.slice(0, end);
          buf = buf.slice(end + 5);
          inData = false;
          const answer = state.mode;
          state.full.push({ to: rcpt, subject: /^Subject: (.*)$/m.exec(data)?.[1] ?? "", answer });
          data = "";
          if (answer === "accept") sock.write("250 2.0.0 queued\r\n");
          else if (answer === "refuse") sock.write("451 4.3.0 try again later\r\n");
          else return void sock.destroy();
          continue;
        }
        const nl = buf.indexOf("\r\n");
        if (nl < 0) return;
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 2);
        const cmd = line.slice(0, 4).toUpperCase();
        if (cmd === "EHLO" || cmd === "HELO") sock.write("250-ctl\r\n250 8BITMIME\r\n");
        else if (cmd === "MAIL" || cmd === "RSET" || cmd === "NOOP") sock.write("250 ok\r\n");
        else if (cmd === "RCPT") {
          rcpt = /<([^>]*)>/.exec(line)?.[1] ?? "";
          sock.write("250 ok\r\n");
        } else if (cmd === "DATA") {
          inData = true;
          sock.write("354 go ahead\r\n");
        } else if (cmd === "QUIT") {
          sock.write("221 bye\r\n");
          sock.end();
        } else sock.write("502 unknown command\r\n");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const state: CtlSmtp = {
    url: `smtp://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    mode,
    full: [],
    stop: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  return state;
}
