import { describe, expect, test } from "bun:test";
import { displayText, formatDatum, formatSize, isoWeek, isStorableText, jsonLine, STORABLE_CHARACTER, storableText } from "../src/format.ts";
import { alarmSubject } from "../src/alarms/mail-channel.ts";

describe("formatSize (1024-based)", () => {
  test("bytes stay whole below 1024", () => {
    expect(formatSize(0)).toBe("0 B");
    expect(formatSize(512)).toBe("512 B");
    expect(formatSize(1023)).toBe("1023 B");
  });

  test("1024 bytes is 1.0 KB, and larger units carry one decimal", () => {
    expect(formatSize(1024)).toBe("1.0 KB");
    expect(formatSize(1536)).toBe("1.5 KB");
    expect(formatSize(23.4 * 1024 * 1024)).toBe("23.4 MB");
  });

  test("a value that would round to 1024.0 moves up a unit", () => {
    expect(formatSize(1024 * 1024 - 1)).toBe("1.0 MB");
    expect(formatSize(1024 * 1024)).toBe("1.0 MB");
    expect(formatSize(1024 * 1024 - 52)).toBe("1023.9 KB");
    expect(formatSize(1024 ** 3 - 1)).toBe("1.0 GB");
    expect(formatSize(1024 ** 3)).toBe("1.0 GB");
    expect(formatSize(1.5 * 1024 ** 4)).toBe("1.5 TB");
  });

  test("a negative or non-finite size is refused", () => {
    expect(() => formatSize(-1)).toThrow();
    expect(() => formatSize(Number.NaN)).toThrow();
  });
});

describe("formatDatum (dd/mm/yyyy hh:mm in a time zone)", () => {
  test("summer time in Amsterdam is UTC+2", () => {
    expect(formatDatum(new Date("2026-07-23T12:00:00Z"), "Europe/Amsterdam")).toBe("23/07/2026 14:00");
  });

  test("winter time in Amsterdam is UTC+1", () => {
    expect(formatDatum(new Date("2026-01-05T07:03:00Z"), "Europe/Amsterdam")).toBe("05/01/2026 08:03");
  });

  test("midnight is 00, and the local date may differ from the UTC date", () => {
    expect(formatDatum("2026-01-04T23:30:00.000Z", "Europe/Amsterdam")).toBe("05/01/2026 00:30");
    expect(formatDatum("2026-03-29T01:00:00.000Z", "Europe/Amsterdam")).toBe("29/03/2026 03:00");
    expect(formatDatum("2026-07-23T12:00:00.000Z", "UTC")).toBe("23/07/2026 12:00");
  });
});

describe("isoWeek (UTC)", () => {
  test("weeks run Monday to Sunday", () => {
    expect(isoWeek(new Date("2026-07-20T00:00:00Z"))).toBe("2026-W30"); // Monday
    expect(isoWeek(new Date("2026-07-23T12:00:00Z"))).toBe("2026-W30");
    expect(isoWeek(new Date("2026-07-26T18:00:00Z"))).toBe("2026-W30"); // Sunday, weekrapport's fire time
    expect(isoWeek(new Date("2026-07-27T00:00:00Z"))).toBe("2026-W31");
  });

  test("the Thursday decides the year at the turn of the year", () => {
    expect(isoWeek(new Date("2026-01-01T00:00:00Z"))).toBe("2026-W01"); // a Thursday
    expect(isoWeek(new Date("2026-12-31T00:00:00Z"))).toBe("2026-W53");
    expect(isoWeek(new Date("2027-01-03T12:00:00Z"))).toBe("2026-W53"); // Sunday
    expect(isoWeek(new Date("2027-01-04T00:00:00Z"))).toBe("2027-W01");
    expect(isoWeek(new Date("2024-12-30T00:00:00Z"))).toBe("2025-W01");
  });
});

describe("text from the application in lines a person reads", () => {
  // U+202E shows what follows backwards; U+009B is a one-character ESC [ for a terminal.
  const name = "Oefening\u202e nekorbeg tein \u2066x\u2069\u009b2K\r\nBcc: a@b";
  test("displayText drops what changes the layout of the line, and nothing else", () => {
    expect(displayText(name)).toBe("Oefening nekorbeg tein x2K Bcc: a@b");
    expect(displayText("Gemeente ’s-Hertogenbosch — Zuid 😀")).toBe("Gemeente ’s-Hertogenbosch — Zuid 😀");
  });
  test("displayText makes a line break one space and any run of white space (NBSP, U+2003, U+3000) one space", () => {
    expect(displayText("failed\u2028STATUS")).toBe("failed STATUS");
    expect(displayText("a\u2029b\u0085c\u000bd\u000ce\r\nf\u001eg")).toBe("a b c d e f g");
    expect(displayText("in orde" + "\u00a0".repeat(60) + "(Holding)")).toBe("in orde (Holding)");
    expect(displayText("a\u2003\u3000\t b")).toBe("a b");
    // A space on either side of a character left out is one space.
    expect(displayText("a \u202e b\u2028\u202e\u2029c")).toBe("a b c");
    // None at either end: "— " + a name starting with an NBSP is not two spaces.
    expect(displayText("\u00a0\u3000Alfa BV\u2028 ")).toBe("Alfa BV");
  });
  test("jsonLine escapes C1 controls, bidi controls and line separators too, and parses to the same value", () => {
    const value = { actor: name, ok: "\u2028\u2029\u007f" };
    const line = jsonLine(value);
    expect(line).not.toMatch(/[\u007f-\u009f\u202a-\u202e\u2066-\u2069\u2028\u2029\r\n]/);
    expect(line).toContain("\\u009b");
    expect(JSON.parse(line)).toEqual(value);
  });
  test("an alarm's mail subject shows a tenant name without them", () => {
    const subject = alarmSubject({ titel: "Auditketen gebroken", message: `Audit-hashketen verbroken bij 1 tenant(s): ${name}` } as Parameters<typeof alarmSubject>[0]);
    expect(subject).not.toMatch(/[\u202e\u2066\u2069\u009b\r\n]/);
    expect(subject).toStartWith("ALARM Auditketen gebroken: Audit-hashketen verbroken bij 1 tenant(s): Oefening");
  });
});

describe("storable text (STORABLE_CHARACTER, isStorableText)", () => {
  test("the whole-text check takes exactly what the schema's per-character pattern takes, and what storableText leaves as it is", () => {
    const pattern = new RegExp(`^${STORABLE_CHARACTER}*$`);
    const units = ["a", "\u0000", "\u0001", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d\ude00", "\ufffd", "é"];
    // Every text of up to three of these units, pairs split and joined in every way.
    let texts = [""];
    for (let n = 0; n < 3; n++) texts = [...texts, ...texts.flatMap((t) => units.map((u) => t + u))];
    for (const t of new Set(texts)) {
      expect([t, isStorableText(t)]).toEqual([t, pattern.test(t)]);
      expect([t, isStorableText(t)]).toEqual([t, storableText(t) === t]);
    }
  });

  test("judges a text of six million UTF-16 units (the pattern repeated over such a text answers false)", () => {
    const long = "aé\ud83d\ude00".repeat(1_500_000);
    expect(isStorableText(long)).toBe(true);
    expect(isStorableText(long + "\u0000")).toBe(false);
  });
});
