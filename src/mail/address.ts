// What counts as an e-mail address, for the configuration and the write API alike.
// Deliberately simple: one @, a dot in the domain, and none of the characters with which
// one address field names other or more addresses: white space, angle brackets, and
// `, ; : " ( ) [ ] \` ("root,evil@x.nl" went to evil@x.nl, past the check that a list
// holds each address once). The SMTP server has the final word; this catches typos such
// as a missing @ as well.
export const EMAIL_PATTERN = /^[^\s@<>,;:"()[\]\\\u0000-\u001f\u007f-\u009f]+@[^\s@<>,;:"()[\]\\\u0000-\u001f\u007f-\u009f]+\.[^\s@<>,;:"()[\]\\\u0000-\u001f\u007f-\u009f]+$/;

export function isEmailAddress(value: string): boolean {
  return EMAIL_PATTERN.test(value);
}
