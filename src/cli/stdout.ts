// The CLI's standard output. console.log (and process.stdout.write) in Bun drop a
// failed write silently: `nachtwacht key > full-disk/key.txt` would exit 0 with an empty
// file. Here every byte goes out through write(2) on fd 1, and a failure throws.
import { writeSync } from "node:fs";

/** Standard output could not be written (ENOSPC, EIO, EPIPE, …): the command's output is incomplete. */
export class StdoutFailed extends Error {
  constructor(readonly code: string) {
    super(`standaarduitvoer niet geschreven (${code}): de uitvoer is onvolledig`);
    this.name = "StdoutFailed";
  }
}

const pause = new Int32Array(new SharedArrayBuffer(4));

/** Writes all of `text` to fd 1, or throws StdoutFailed. Waits out EAGAIN (a non-blocking pipe that is full). */
export function writeStdout(text: string): void {
  const bytes = Buffer.from(text, "utf8");
  let done = 0;
  while (done < bytes.length) {
    try {
      done += writeSync(1, bytes, done, bytes.length - done);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? String(e);
      if (code !== "EAGAIN") throw new StdoutFailed(code);
      Atomics.wait(pause, 0, 0, 5); // the reader has not caught up: a short synchronous pause
    }
  }
}
