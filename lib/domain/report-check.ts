// Whether a report body is one the service can store: the TypeBox schema of its kind (compiled by
// Ajv) and the checks JSON Schema cannot express (free trees: lib/domain/storable.ts; typed snapshot
// leaves: lib/domain/snapshot.ts). The gateway runs it before it answers 200; a worker runs it again on a
// report that storage refused, to name the field at fault in the dead letter (workers/isolate.ts).
import type { FieldError } from '../contract/errors.js';
import { compile, type Validator } from '../contract/validation.js';
import { Heartbeat, Status, diagnosticsSchema, helpSchema, SNAPSHOT_MAX_DEPTH } from '../contract/schemas/ingest.js';
import { metricsBatchSchema, METRIC_TS_MIN, METRIC_TS_MAX } from '../contract/schemas/metrics.js';
import { CommandAck } from '../contract/schemas/commands.js';
import { treeErrors } from './storable.js';
import { checkSnapshot } from './snapshot.js';
import { isSlug, isUuid } from '../contract/ids.js';

export interface Refusal {
  /** The 422 answer's detail. */
  detail: string;
  errors: FieldError[];
}

export type CheckedKind = 'heartbeat' | 'diagnostics' | 'status' | 'help' | 'command_ack' | 'metrics';

const fieldList = (errors: FieldError[]) => errors.map((e) => `${e.path} ${e.message}`).join('; ');

export function reportChecker(maxItems: number) {
  const schemas: Record<CheckedKind, Validator<unknown>> = {
    heartbeat: compile(Heartbeat),
    diagnostics: compile(diagnosticsSchema(maxItems)),
    status: compile(Status),
    help: compile(helpSchema(maxItems)),
    command_ack: compile(CommandAck),
    // As queued: the records of one request that were new to the gateway.
    metrics: compile(metricsBatchSchema(maxItems)),
  };

  /** Beyond the schema: free trees and typed leaves. */
  function deep(kind: CheckedKind, body: Record<string, unknown>): Refusal | null {
    if (kind === 'status' && body.snapshot !== undefined) {
      const tree = treeErrors(body.snapshot, '/snapshot', SNAPSHOT_MAX_DEPTH);
      if (tree.length) return { detail: `snapshot cannot be stored: ${fieldList(tree)}`, errors: tree };
      const typed = checkSnapshot(body.snapshot);
      if (typed.length) return { detail: `typed snapshot leaf does not fit its type: ${fieldList(typed)}`, errors: typed };
    }
    if (kind === 'command_ack' && body.output !== undefined) {
      const tree = treeErrors(body.output, '/output');
      if (tree.length) return { detail: `output cannot be stored: ${fieldList(tree)}`, errors: tree };
    }
    return null;
  }

  return {
    /** Schema only (the gateway picks its own schema for some routes: one metrics record or many). */
    schema(kind: CheckedKind, body: unknown): Refusal | null {
      const v = schemas[kind];
      if (v(body)) return null;
      const errors = v.errorsOf(body);
      return { detail: `schema violation: ${fieldList(errors)}`, errors };
    },
    deep,
    /** Everything: why `body` cannot be stored as a report of `kind`, or null. */
    check(kind: string, body: unknown): Refusal | null {
      if (!(kind in schemas)) return null;
      const k = kind as CheckedKind;
      if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        return { detail: 'the body must be a JSON object', errors: [{ path: '/', message: 'must be object' }] };
      }
      const refused = this.schema(k, body) ?? deep(k, body as Record<string, unknown>);
      if (refused || k !== 'metrics') return refused;
      return metricTimes((body as { items: { ts?: string }[] }).items, (i) => `/items/${i}`);
    },
  };
}

export type ReportChecker = ReturnType<typeof reportChecker>;

/** Host-metric times outside 2000 … 2100 (ClickHouse's DateTime ends in 2105): the first one. */
export function metricTimes(records: { ts?: string }[], path: (i: number) => string): Refusal | null {
  for (let i = 0; i < records.length; i++) {
    const ts = records[i]!.ts;
    if (ts === undefined) continue;
    const ms = Date.parse(ts);
    if (!(ms >= METRIC_TS_MIN && ms < METRIC_TS_MAX)) {
      return { detail: `${path(i)}/ts ${JSON.stringify(ts)} is outside 2000-01-01 … 2100-01-01`, errors: [{ path: `${path(i)}/ts`, message: 'out of range' }] };
    }
  }
  return null;
}

/** Receive times the worker stores (ClickHouse's DateTime ends in 2105; Postgres's far later). */
const AT_MIN = Date.parse('2000-01-01T00:00:00Z');
const AT_MAX = Date.parse('2100-01-01T00:00:00Z');

/**
 * Why a queued report's envelope (lib/contract/messages.ts `WireReport`, written by the gateway, never by the
 * agent) cannot be stored, or null. A gateway never writes a bad one; a publisher that bypassed it
 * can, and the worker must then prove the report at fault (dead letter) rather than take the
 * failure it causes for an outage.
 */
export function envelopeRefusal(r: { id?: unknown; k?: unknown; c?: unknown; cs?: unknown; m?: unknown; s?: unknown; t?: unknown; at?: unknown; ik?: unknown; dc?: unknown; ci?: unknown }): string | null {
  const uuid = (v: unknown) => typeof v === 'string' && isUuid(v);
  const slug = (v: unknown) => typeof v === 'string' && isSlug(v);
  if (!uuid(r.id)) return 'envelope: id must be a UUID';
  if (typeof r.k !== 'string') return 'envelope: k must be a report kind';
  if (!uuid(r.c)) return 'envelope: c must be a UUID';
  if (!slug(r.cs) || !slug(r.m) || !slug(r.s)) return 'envelope: cs, m and s must be slugs';
  if (!uuid(r.t)) return 'envelope: t must be a UUID';
  if (!(Number.isSafeInteger(r.at) && (r.at as number) >= AT_MIN && (r.at as number) < AT_MAX)) return 'envelope: at must be a time in ms from 2000 to 2100';
  if (r.ik !== undefined && typeof r.ik !== 'string') return 'envelope: ik must be a string';
  if (r.dc !== undefined && !(Array.isArray(r.dc) && r.dc.every(uuid))) return 'envelope: dc must be a list of UUIDs';
  if (r.ci !== undefined && !uuid(r.ci)) return 'envelope: ci must be a UUID';
  return null;
}
