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

export const integer = (options?: IntegerOptions) => Type.Integer(options);

export const nullable = <T extends TSchema>(schema: T, options?: SchemaOptions) => t.Union([schema, t.Null()], options);

export const enumOf = <const V extends readonly [string, ...string[]]>(values: V, options?: SchemaOptions) =>
  t.UnionEnum(values, { ...options, default: undefined });

/**
 * The pattern of text as both stores keep it: well-formed Unicode without NUL (U+0000).
 * SQLite stores a NUL; PostgreSQL's text refuses it, so a batch holding one would be a
 * 500 there (and lost on every retry) while SQLite took it. A lone UTF-16 surrogate
 * (half of a character, "\ud800" in JSON) is hashed as JavaScript holds it, but both
 * stores keep U+FFFD instead: the entry would never verify again. Both refused, with a
 * 400 that says why. Matched per UTF-16 unit, so the same with or without the u flag.
 */
export const NO_NUL = "^(?:[^\\u0000\\ud800-\\udfff]|[\\ud800-\\udbff][\\udc00-\\udfff])*$";

/** A text field of a write API body: t.String of well-formed Unicode without NUL characters (NO_NUL). */
export const text = (options?: StringOptions) => t.String({ ...options, pattern: NO_NUL });

/** A moment as Date.toISOString() writes it (UTC). */
export const dateTime = (options?: StringOptions) => t.String({ ...options, format: "date-time" });
