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
  // URL re-encodes what it parses (`^` becomes `%5E`): the password as written too, cut
  // from the text itself, which is what an echo of the URL shows.
  const rest = url.slice(url.indexOf("//") + 2);
  const authority = rest.slice(0, rest.search(/[/?#]|$/));
  const userinfo = authority.lastIndexOf("@") < 0 ? "" : authority.slice(0, authority.lastIndexOf("@"));
  if (userinfo.includes(":")) found.push(userinfo.slice(userinfo.indexOf(":") + 1));
  const query = (written: string) => (written.includes("?") ? written.slice(written.indexOf("?") + 1).split("#")[0]! : "");
  for (const part of [...u.search.slice(1).split("&"), ...query(url).split("&")]) {
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
