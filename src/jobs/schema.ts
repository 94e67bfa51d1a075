// Building blocks for the TypeBox schemas of the job bodies. Each job declares its
// bodies once with Elysia's `t`; the TypeScript type is Static<typeof Schema>, the
// OpenAPI document at /docs/json shows the schema as it is, and backup-status's request
// body is validated against its schema. Three of `t`'s helpers do not fit a JSON body:
//  - t.Integer also accepts a numeric string ("5"), meant for query strings: integer()
//    is TypeBox's own, a JSON number without fraction;
//  - t.Nullable adds OpenAPI 3.0's `nullable: true`, unknown to the 3.1 document:
//    nullable() is the plain anyOf with null;
//  - t.UnionEnum sets `default` to its first value, which Swagger UI shows as a
//    default: enumOf() leaves it out.
import { Type, type IntegerOptions, type SchemaOptions, type StringOptions, type TSchema } from "@sinclair/typebox";
import { t } from "elysia";
import { STORABLE_CHARACTER } from "../format.ts";
import { EMAIL_PATTERN } from "../mail/address.ts";

export const integer = (options?: IntegerOptions) => Type.Integer(options);

export const nullable = <T extends TSchema>(schema: T, options?: SchemaOptions) => t.Union([schema, t.Null()], options);

export const enumOf = <const V extends readonly [string, ...string[]]>(values: V, options?: SchemaOptions) =>
  t.UnionEnum(values, { ...options, default: undefined });

/** What a string pattern of these schemas asks for, in Dutch, by pattern: the 400 message says it (src/http/errors.ts). */
export const PATTERN_MEANINGS = new Map<string, string>();

/** " van 1 tot 200 tekens", " van hoogstens 1000 elementen": a length rule, in Dutch. */
export function lengths(min: number | undefined, max: number | undefined, unit: string): string {
  if (min !== undefined && min > 0 && max !== undefined) return ` van ${min} tot ${max} ${unit}`;
  if (max !== undefined) return ` van hoogstens ${max} ${unit}`;
  if (min !== undefined && min > 0) return ` van ten minste ${min} ${unit}`;
  return "";
}

const meaning = (pattern: string, dutch: string) => {
  PATTERN_MEANINGS.set(pattern, dutch);
  return pattern;
};

/**
 * The pattern of `min` to `max` characters of storable text (STORABLE_CHARACTER, src/format.ts:
 * well-formed Unicode without NUL, as both stores keep it; refused with a 400 that says why). The length is in the pattern, not
 * in minLength/maxLength: TypeBox counts those in UTF-16 units, where JSON Schema (the
 * OpenAPI document, and a client built from it) counts characters, so 150 emoji would
 * pass the document's maxLength 200 and be refused here.
 */
export function textPattern(min = 0, max?: number): string {
  return meaning(`^${STORABLE_CHARACTER}{${min},${max ?? ""}}$`, `een tekst (geldige Unicode, zonder NUL-teken U+0000 of losse surrogaathelft)${lengths(min, max, "tekens")}`);
}

/**
 * The pattern of a whole number from 1 to `max` written in decimal digits, without a sign,
 * spaces or leading zeros: for a path parameter, which is text. Exactly the numbers an
 * integer({ minimum: 1, maximum: max }) takes, so the path and the body agree on an id.
 */
export function positiveIntegerPattern(max: number, dutch: string): string {
  const digits = String(max);
  const n = digits.length;
  const options = n > 1 ? [n > 2 ? `[1-9][0-9]{0,${n - 2}}` : "[1-9]"] : [];
  for (let i = 0; i < n; i++) {
    const low = i === 0 ? 1 : 0;
    const d = Number(digits[i]);
    if (d - 1 >= low) options.push(`${digits.slice(0, i)}[${low}-${d - 1}]${n - i - 1 > 0 ? `[0-9]{${n - i - 1}}` : ""}`);
  }
  options.push(digits);
  return meaning(`^(?:${options.join("|")})$`, dutch);
}

/** A text field of a write API body: t.String of `minLength` to `maxLength` characters (textPattern). */
export const text = ({ minLength, maxLength, ...options }: StringOptions = {}) => t.String({ ...options, pattern: textPattern(minLength, maxLength) });

/** An e-mail address field: EMAIL_PATTERN, of `minLength` to `maxLength` characters of text (textPattern). */
export const emailText = ({ minLength, maxLength, ...options }: StringOptions = {}) =>
  t.String({ ...options, pattern: meaning(`(?=${textPattern(minLength, maxLength)})${EMAIL_PATTERN.source}`, `een e-mailadres (naam@domein)${lengths(minLength, maxLength, "tekens")}`) });

/** An IPv4 or IPv6 address as a client's text gives it: hexadecimal digits, colons and dots (ASCII, so the lengths count alike). */
export const ipText = (options: StringOptions = {}) => t.String({ ...options, pattern: meaning("^[0-9A-Fa-f:.]+$", `een IPv4- of IPv6-adres${lengths(options.minLength, options.maxLength, "tekens")}`) });

/** A moment as Date.toISOString() writes it (UTC). */
export const dateTime = (options?: StringOptions) => t.String({ ...options, format: "date-time" });
