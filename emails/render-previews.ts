// Renders every e-mail template with its preview props (and a few "something is wrong"
// variants) to out/emails/<name>.html and .txt, and, when Chromium is installed, a
// full-page PNG of each for a quick look:
//
//   bun run emails:preview
//
// Chromium: /usr/bin/chromium (Debian's package) or CHROMIUM_PATH.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { ComponentType } from "react";
import { renderEmail } from "../src/mail/render.ts";
import { Alarm, type AlarmProps } from "./Alarm.tsx";
import { DailyReport, type DailyReportProps } from "./DailyReport.tsx";
import { WeeklyReport, type WeeklyReportProps } from "./WeeklyReport.tsx";

const OUT = resolve(import.meta.dir, "..", "out", "emails");

const weekGebroken: WeeklyReportProps = {
  ...WeeklyReport.PreviewProps,
  status: {
    niveau: "actie",
    kop: "Actie nodig: de auditketen is gebroken",
    punten: ["De auditketen is gebroken bij volgnummer 18204: een entry is na het schrijven gewijzigd (de hash klopt niet meer)."],
  },
  keten: {
    staat: "gebroken",
    gecontroleerd: "26/07/2026 03:00",
    aantalEntries: 48211,
    fout: { seq: 18204, reden: "hash-afwijkend", uitleg: "een entry is na het schrijven gewijzigd (de hash klopt niet meer)" },
  },
};

const dagFout: DailyReportProps = {
  ...DailyReport.PreviewProps,
  status: {
    niveau: "actie",
    kop: "Actie nodig",
    punten: [
      "De laatste back-up (23/07/2026 03:12) is mislukt: pg_dump: schijf vol (/var/backups).",
      "De auditketen van 1 tenant is gebroken (Gemeente Zuiderhaven).",
      "backup-controle is niet gestart sinds 23/07/2026 07:15.",
    ],
  },
  backup: { resultaat: "FOUT", gelukt: false, datum: "23/07/2026 03:12", grootte: "0 B", bron: "host-cron" },
  backupDetail: { ...DailyReport.PreviewProps.backupDetail, exitCode: 2, foutmelding: "pg_dump: schijf vol (/var/backups)" },
  verificatie: {
    tijdstip: "23/07/2026 03:00",
    gecontroleerd: 42,
    nietGecontroleerd: 1,
    aantalGebroken: 1,
    gebroken: [
      {
        tenantId: 7,
        tenant: "Gemeente Zuiderhaven",
        seq: 18204,
        reden: "hash-afwijkend",
        uitleg: "een entry is na het schrijven gewijzigd (de hash klopt niet meer)",
        gecontroleerd: "23/07/2026 03:00",
      },
    ],
  },
  taken: DailyReport.PreviewProps.taken.map((t) =>
    t.job === "backup-controle" ? { ...t, achterstallig: true, status: "gemist" as const, laatstVerwacht: "23/07/2026 07:15", laatsteStart: "22/07/2026 23:15" } : t,
  ),
};

/** A fresh installation: audit-anker has not signed an installation checkpoint yet. */
const dagNieuw: DailyReportProps = {
  ...DailyReport.PreviewProps,
  anker: { ...DailyReport.PreviewProps.anker, installatieCheckpoint: null },
};

const backupAlarm: AlarmProps = {
  type: "backup-failure",
  titel: "Back-up mislukt",
  message: "Back-up mislukt: pg_dump: schijf vol (/var/backups)",
  tijdstip: "23/07/2026 03:12",
  tijdzone: "Europe/Amsterdam",
  context: [
    { sleutel: "exitCode", waarde: "2" },
    { sleutel: "bestandsnaam", waarde: "nachtwacht-2026-07-23.db.zst" },
    { sleutel: "grootte", waarde: "0" },
  ],
  watTeDoen: [
    "Lees de foutmelding en exitcode hieronder en het log van de back-uptaak op de host.",
    "Los de oorzaak op (schijfruimte, rechten, bereikbaarheid van de opslag) en start de back-up met de hand opnieuw.",
    "Controleer daarna dat backup-status een geslaagde run meldt (het dagrapport toont dan OK).",
  ],
};

const previews: [string, ComponentType<any>, object][] = [
  ["WeeklyReport", WeeklyReport, WeeklyReport.PreviewProps],
  ["WeeklyReport-gebroken", WeeklyReport, weekGebroken],
  ["DailyReport", DailyReport, DailyReport.PreviewProps],
  ["DailyReport-fout", DailyReport, dagFout],
  ["DailyReport-zonder-checkpoint", DailyReport, dagNieuw],
  ["Alarm", Alarm, Alarm.PreviewProps],
  ["Alarm-backup", Alarm, backupAlarm],
];

function findChromium(): string | null {
  for (const p of [process.env.CHROMIUM_PATH, "/usr/bin/chromium", "/usr/bin/chromium-browser"]) {
    if (p && existsSync(p)) return p;
  }
  return null;
}

const CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run", "--hide-scrollbars"];

/** Full-page PNGs through playwright-core; falls back to chromium's own --screenshot (viewport only). */
async function screenshots(chromium: string, files: { html: string; png: string }[]): Promise<void> {
  try {
    const { chromium: pw } = await import("playwright-core");
    const browser = await pw.launch({ executablePath: chromium, args: CHROMIUM_ARGS });
    try {
      const page = await browser.newPage({ viewport: { width: 720, height: 900 }, deviceScaleFactor: 1 });
      for (const f of files) {
        await page.goto(`file://${f.html}`);
        await page.screenshot({ path: f.png, fullPage: true });
      }
    } finally {
      await browser.close();
    }
    return;
  } catch (e) {
    console.warn(`playwright-core failed (${e instanceof Error ? e.message.split("\n")[0] : e}); using chromium --screenshot`);
  }
  for (const f of files) {
    const profile = mkdtempSync(join(tmpdir(), "nachtwacht-chromium-"));
    try {
      const p = Bun.spawnSync([chromium, "--headless", ...CHROMIUM_ARGS, `--user-data-dir=${profile}`, "--window-size=720,2400", `--screenshot=${f.png}`, `file://${f.html}`], {
        stdout: "ignore",
        stderr: "ignore",
      });
      if (p.exitCode !== 0) console.warn(`chromium exited with ${p.exitCode} for ${f.html}`);
    } finally {
      rmSync(profile, { recursive: true, force: true });
    }
  }
}

mkdirSync(OUT, { recursive: true });
const files: { html: string; png: string }[] = [];
for (const [name, template, props] of previews) {
  const { html, text } = await renderEmail(template, props);
  const htmlPath = join(OUT, `${name}.html`);
  writeFileSync(htmlPath, html);
  writeFileSync(join(OUT, `${name}.txt`), text);
  files.push({ html: htmlPath, png: join(OUT, `${name}.png`) });
  console.log(`${htmlPath}  (+ .txt)`);
}
const chromium = findChromium();
if (chromium) {
  await screenshots(chromium, files);
  for (const f of files) if (existsSync(f.png)) console.log(f.png);
} else {
  console.log("Chromium not found (apt install chromium, or set CHROMIUM_PATH): HTML and text only.");
}
