// Shared by the write-API tests: the application's secret (APP_SECRET) and one entry.
export const APP_SECRET = "app-secret-0123456789abcdef0123456789abcdef";

export const auditEntry = (tenantId: number, i: number, extra: Record<string, unknown> = {}) => ({
  tenantId,
  actor: `user${i}@example.nl`,
  action: "dossier.bekeken",
  subject: `dossier/${i}`,
  details: { i, nested: { b: 2, a: 1 } },
  ...extra,
});
