import { defineConfig } from "drizzle-kit";

// PostgreSQL (DATABASE_URL=postgres://…); db/schema-pg.ts mirrors db/schema.ts.
export default defineConfig({
  dialect: "postgresql",
  schema: "./db/schema-pg.ts",
  out: "./db/migrations-pg",
});
