// audit-anker (contract §4): records every tenant's chain head as a signed anchor in
// audit_head_anchors and appends it to AUDIT_ANKER_BESTAND, the append-only file the
// host backup carries off the machine. audit-verificatie then finds a cut-off tail
// (kop-ontbreekt) or a recomputed chain (anker-afwijkend); verify-anchors checks a
// database against the file alone.
import type { Database } from "bun:sqlite";
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { anchorLine, signAnchor, verifyAnchorSignature, type AnchorRecord } from "../audit/anchors.ts";
import type { Deps } from "../deps.ts";
import { defineJob, type JobResult } from "./job.ts";

export interface AuditAnkerBody {
  ok: true;
  ondertekend: boolean;
  waarschuwing?: string;
  /** Anchors written by this run. */
  aantal: number;
  /** Tenants whose head had not moved since their latest anchor. */
  ongewijzigd: number;
  bestand: string;
  ankers: { tenantId: number; seq: number; hash: string }[];
}

/**
 * Appends lines and forces them to disk before returning. The file is opened with
 * 'a' (O_APPEND): every write goes to the end, nothing already there is rewritten.
 * A new file's directory entry is synced too, so the file survives a power loss.
 */
function appendDurably(path: string, lines: string[]): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true });
  const isNew = !existsSync(path);
  const fd = openSync(path, "a", 0o640);
  try {
    const buf = Buffer.from(lines.map((l) => l + "\n").join(""), "utf8");
    let off = 0;
    while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  if (isNew) {
    const dfd = openSync(dir, "r");
    try {
      fsyncSync(dfd);
    } finally {
      closeSync(dfd);
    }
  }
}

interface Head {
  tenantId: number;
  seq: number;
  hash: string;
}

function chainHeads(sqlite: Database): Head[] {
  // One indexed probe per tenant: the primary key (tenant_id, seq) gives the head.
  const tenants = sqlite.query("SELECT id FROM tenants ORDER BY id").values() as [number][];
  const head = sqlite.query("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1");
  const out: Head[] = [];
  for (const [tenantId] of tenants) {
    const h = head.get(tenantId) as { seq: number; hash: string } | null;
    if (h) out.push({ tenantId, seq: h.seq, hash: h.hash });
  }
  return out;
}

export async function runAuditAnker(deps: Deps, now: Date): Promise<JobResult<AuditAnkerBody>> {
  const { sqlite } = deps.store;
  const key = deps.config.auditAnkerSleutel;
  const tijdstip = now.toISOString();
  const latest = sqlite.query(
    "SELECT seq, hash, tijdstip, handtekening FROM audit_head_anchors WHERE tenant_id = ? ORDER BY seq DESC, id DESC LIMIT 1",
  );

  const records: AnchorRecord[] = [];
  let ongewijzigd = 0;
  for (const h of chainHeads(sqlite)) {
    const last = latest.get(h.tenantId) as { seq: number; hash: string; tijdstip: string; handtekening: string | null } | null;
    // A head that has not moved since its latest anchor adds nothing: skip it, so an
    // idle tenant does not grow the table and the file by a line a day. Not when that
    // anchor would fail the current key (written unsigned or under an older key).
    const sameHead = last !== null && last.seq === h.seq && last.hash === h.hash;
    const stillValid =
      key === null || (last !== null && verifyAnchorSignature(key, { tenantId: h.tenantId, seq: last.seq, hash: last.hash, tijdstip: last.tijdstip }, last.handtekening));
    if (sameHead && stillValid) {
      ongewijzigd++;
      continue;
    }
    const facts = { tenantId: h.tenantId, seq: h.seq, hash: h.hash, tijdstip };
    records.push({ ...facts, handtekening: key === null ? null : signAnchor(key, facts) });
  }

  if (records.length > 0) {
    // The file first: it is the copy that leaves the machine. Should the insert below
    // fail, the file holds an anchor the database lacks, which verify-anchors still
    // checks against the chain; the reverse order could lose the off-machine copy.
    appendDurably(deps.config.auditAnkerBestand, records.map(anchorLine));
    const insert = sqlite.query("INSERT INTO audit_head_anchors (tenant_id, seq, hash, tijdstip, handtekening) VALUES (?, ?, ?, ?, ?)");
    sqlite.transaction(() => {
      for (const r of records) insert.run(r.tenantId, r.seq, r.hash, r.tijdstip, r.handtekening);
    })();
  }

  const body: AuditAnkerBody = {
    ok: true,
    ondertekend: key !== null,
    ...(key === null
      ? {
          waarschuwing:
            "AUDIT_ANKER_SLEUTEL is niet gezet: de ankers zijn niet ondertekend. Wie de database kan schrijven, kan ze dan ook vervalsen.",
        }
      : {}),
    aantal: records.length,
    ongewijzigd,
    bestand: deps.config.auditAnkerBestand,
    ankers: records.map((r) => ({ tenantId: r.tenantId, seq: r.seq, hash: r.hash })),
  };
  return { status: 200, body };
}

const anchorSchema = {
  type: "object",
  required: ["tenantId", "seq", "hash"],
  properties: { tenantId: { type: "integer" }, seq: { type: "integer" }, hash: { type: "string" } },
};

export const auditAnkerJob = defineJob({
  name: "audit-anker",
  summary: "Legt per tenant de kop van de auditketen vast als ondertekend anker",
  description:
    "Schrijft voor elke tenant met audit-entries de kop van de keten (volgnummer, hash, tijdstip) als anker in de database, " +
    "HMAC-SHA256-ondertekend met AUDIT_ANKER_SLEUTEL, en voegt het als JSON-regel toe aan AUDIT_ANKER_BESTAND. " +
    "Een kop die sinds het laatste geldige anker niet veranderde, wordt overgeslagen (`ongewijzigd`). " +
    "Zonder sleutel zijn de ankers niet ondertekend en zegt het antwoord dat (`ondertekend: false`, `waarschuwing`). Antwoordt altijd 200.",
  run: (deps, now) => runAuditAnker(deps, now),
  openapi: {
    responses: {
      200: {
        description: "Ankers vastgelegd.",
        schema: {
          type: "object",
          required: ["ok", "ondertekend", "aantal", "ongewijzigd", "bestand", "ankers"],
          properties: {
            ok: { type: "boolean" },
            ondertekend: { type: "boolean" },
            waarschuwing: { type: "string" },
            aantal: { type: "integer" },
            ongewijzigd: { type: "integer" },
            bestand: { type: "string" },
            ankers: { type: "array", items: anchorSchema },
          },
        },
      },
    },
  },
});
