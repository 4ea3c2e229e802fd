// Ajv, compiled once from the TypeBox schemas. Errors come back as {path, message} pairs with JSON
// Pointer paths (`/items/3/severity`), which is what a 422 body carries.
import { Ajv, type ErrorObject } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { TSchema, Static } from '@sinclair/typebox';
import type { FieldError } from './errors.js';

// ajv-formats is CommonJS with a default export.
const addFormats = (addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ?? addFormatsModule;

// strictNumbers: NaN and ±Infinity are not numbers (JSON's 1e309 parses to Infinity, which no column holds).
export const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false, useDefaults: false, strictNumbers: true });
(addFormats as unknown as (a: Ajv, f: string[]) => void)(ajv, ['date-time', 'uuid', 'email', 'uri', 'date']);

export type Validator<T> = ((data: unknown) => data is T) & { errorsOf(data: unknown): FieldError[] };

const MAX_REPORTED = 20;

export function toFieldErrors(errors: ErrorObject[] | null | undefined): FieldError[] {
  const out: FieldError[] = [];
  for (const e of errors ?? []) {
    if (out.length >= MAX_REPORTED) break;
    let path = e.instancePath || '';
    if (e.keyword === 'required') path += `/${(e.params as { missingProperty: string }).missingProperty}`;
    // A union (anyOf) reports every branch; the branch errors say more, so skip the summary.
    if (e.keyword === 'anyOf') continue;
    out.push({ path: path || '/', message: e.message ?? e.keyword });
  }
  return out;
}

export function compile<S extends TSchema>(schema: S): Validator<Static<S>> {
  const fn = ajv.compile(schema);
  const v = ((data: unknown) => fn(data)) as Validator<Static<S>>;
  v.errorsOf = (data: unknown) => {
    fn(data);
    return toFieldErrors(fn.errors);
  };
  return v;
}
