// What counts as an e-mail address, for the configuration and the write API alike.
// Deliberately simple: one @, no spaces or angle brackets, a dot in the domain. The SMTP
// server has the final word; this catches typos such as a missing @.
export const EMAIL_PATTERN = /^[^\s@<>\u0000]+@[^\s@<>\u0000]+\.[^\s@<>\u0000]+$/;

export function isEmailAddress(value: string): boolean {
  return EMAIL_PATTERN.test(value);
}
