// The PostgreSQL URL a command is given: `--database-url URL`, `--database-url -` (the
// URL on standard input) or DATABASE_URL. A URL that carries a password is refused on
// the command line, where ps and shell history show it: in the user info or in the query
// string (Bun's client also takes `?password=`).
import { carriesPassword, isPostgresUrl } from "../pg/url.ts";

export async function databaseUrl(given: string | undefined, env: Record<string, string | undefined>, stdin: () => Promise<string>): Promise<{ url: string } | { error: string }> {
  let url: string | undefined;
  if (given === "-") url = (await stdin()).trim();
  else if (given !== undefined) {
    if (carriesPassword(given)) return { error: "een wachtwoord hoort niet op de opdrachtregel; geef --database-url - en de URL op standaardinvoer, of zet DATABASE_URL" };
    url = given;
  } else url = env.DATABASE_URL;
  if (!url || !isPostgresUrl(url) || !URL.canParse(url)) return { error: "--database-url (of DATABASE_URL) moet een postgres://-URL zijn" };
  return { url };
}
