// PostgreSQL URLs as the commands take and print them. Small on purpose: the commands
// that only need these do not load the driver.

/** Whether a DATABASE_URL names PostgreSQL. */
export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}

/**
 * The URL without its password, for messages: `postgres://nw:***@host/db`. Bun's client
 * also takes a password from the query string (`?password=`, `?sslpassword=`…): any
 * parameter whose name contains "password" is masked too.
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    for (const name of [...u.searchParams.keys()]) if (/password/i.test(name)) u.searchParams.set(name, "***");
    return u.toString();
  } catch {
    return "(geen geldige URL)";
  }
}

/** Whether a URL carries a password: in the user info, or in the query string (Bun's client also takes `?password=`). */
export function carriesPassword(url: string): boolean {
  if (!URL.canParse(url)) return false;
  const u = new URL(url);
  return u.password !== "" || [...u.searchParams.keys()].some((k) => /password/i.test(k));
}
