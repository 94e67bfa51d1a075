// Starting a worker thread by the name of its entry file in src/ (package.json "build"
// lists each as an entry point of the binary). The URL is made here, in src/, on
// purpose: from source it is this folder; in the compiled binary every module is bundled
// into one file at the binary's root, where `bun build --compile` also puts the entry
// points that sit in src/. A worker file in a subfolder, or a URL made in one, is found
// from source but not in the binary (the verification workers were not, until a test
// ran them there: test/e2e-binary.test.ts).
export type WorkerName = "verify-worker" | "pg-verify-worker" | "checkpoint-worker";

export function startWorker(name: WorkerName): Worker {
  return new Worker(new URL(`./${name}.ts`, import.meta.url).href);
}
