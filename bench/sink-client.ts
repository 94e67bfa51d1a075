// Starts bench/smtp-sink.ts as a child process and reads its port and final count.
import { BUN } from "./lib.ts";

export interface Sink {
  url: string;
  stop(): Promise<{ received: number; bytes: number }>;
}

export async function startSink(): Promise<Sink> {
  const p = Bun.spawn([BUN, new URL("./smtp-sink.ts", import.meta.url).pathname], { stdout: "pipe", stderr: "inherit" });
  const reader = p.stdout.getReader();
  const decoder = new TextDecoder();
  let out = "";
  while (!out.includes("\n")) {
    const r = await reader.read();
    if (r.done) throw new Error("smtp sink exited before it listened");
    out += decoder.decode(r.value, { stream: true });
  }
  const { port } = JSON.parse(out.slice(0, out.indexOf("\n"))) as { port: number };
  out = out.slice(out.indexOf("\n") + 1);
  return {
    url: `smtp://127.0.0.1:${port}`,
    async stop() {
      p.kill("SIGTERM");
      for (let r = await reader.read(); !r.done; r = await reader.read()) out += decoder.decode(r.value, { stream: true });
      await p.exited;
      return JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
    },
  };
}
