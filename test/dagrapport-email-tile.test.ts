// The daily e-mail's "taken" tile counts what the status banner counts: a job that hangs
// or was interrupted is not "Op tijd" (found by a review: green "Op tijd" beside an actie
// point for a hung job).
import { expect, test } from "bun:test";
import { DailyReport } from "../emails/DailyReport.tsx";
import { renderEmail } from "../src/mail/render.ts";

const base = DailyReport.PreviewProps;
const withStatus = (status: "hangt" | "onderbroken") => ({ ...base, taken: base.taken.map((t, i) => (i === 0 ? { ...t, status, achterstallig: false } : { ...t, status: "ok" as const, achterstallig: false })) });

test("a job that hangs is counted in the tile, not 'Op tijd'", async () => {
  const { text } = await renderEmail(DailyReport, withStatus("hangt"));
  expect(text).toContain("Taken vastgelopen: 1");
  expect(text).not.toContain("Geplande taken: Op tijd");
});

test("an interrupted job is counted too; all fine is 'Op tijd'", async () => {
  expect((await renderEmail(DailyReport, withStatus("onderbroken"))).text).toContain("Taken vastgelopen: 1");
  const ok = { ...base, taken: base.taken.map((t) => ({ ...t, status: "ok" as const, achterstallig: false })) };
  expect((await renderEmail(DailyReport, ok)).text).toContain("Geplande taken: Op tijd");
});
