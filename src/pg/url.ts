// PostgreSQL URLs as the commands take and print them. Small on purpose: the commands
// that only need these do not load the driver.

/** Whether a DATABASE_URL names PostgreSQL. */
export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}

/** A query parameter that holds a password: Bun's client also takes one from the query string (`?password=`, `?sslpassword=`…). */
const isPasswordParam = (name: string) => /password/i.test(name);

/**
 * The URL without its password, for messages: `postgres://nw:***@host/db`; any query
 * parameter whose name contains "password" is masked too.
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    for (const name of [...u.searchParams.keys()]) if (isPasswordParam(name)) u.searchParams.set(name, "***");
    return u.toString();
  } catch {
    return "(geen geldige URL)";
  }
}

/**
 * The passwords a URL carries (in the user info, or in the query string), each as
 * written and as decoded: an echoed connection string shows the first
 * (`p%40ss`), a client the second (`p@ss`). What no output may show (secretValues).
 */
export function urlPasswords(url: string): string[] {
  if (!URL.canParse(url)) return [];
  const u = new URL(url);
  const decoded = (s: string) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  };
  const found = u.password === "" ? [] : [u.password, decoded(u.password)];
  for (const part of u.search.slice(1).split("&")) {
    const eq = part.indexOf("=");
    if (eq < 0 || !isPasswordParam(decoded(part.slice(0, eq)))) continue;
    const raw = part.slice(eq + 1);
    found.push(raw, decoded(raw), decoded(raw.replaceAll("+", " ")));
  }
  return [...new Set(found.filter((p) => p !== ""))];
}

/** Whether a URL carries a password: in the user info, or in the query string. */
export function carriesPassword(url: string): boolean {
  return urlPasswords(url).length > 0;
}
