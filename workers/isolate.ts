// Per-report fault isolation. A batch holds the reports of many messages, customers and kinds;
// when storage refuses it, only the reports at fault may pay for it:
//
//   1. the whole batch is applied (the normal case: one transaction, one insert per table);
//   2. it failed: a server that refuses as a whole (lib/infra/storage-errors.ts: an outage that is
//      `whole`: unreachable, read-only, full, a table missing) fails everything alike -> the
//      caller retries the whole batch later (never a dead letter for that);
//   3. otherwise each unit is checked again (the caller's `explain`: its envelope and schema,
//      lib/domain/report-check.ts): a unit that a gateway of another version, or a publisher that
//      bypassed the gateway, let through is failed at once as data, with the field at fault; the
//      rest is applied again;
//   4. still failing: the batch is split in halves and each half applied, recursively, down to
//      the single units that fail (every apply is idempotent, so applying a half again that had
//      partly landed changes nothing). At most `budget` applies: units not isolated by then are
//      left for a later delivery, which groups them differently.
//
// A unit that fails alone is failed with what its error proves: data (the caller dead-letters it)
// or an outage (the caller retries its message: a report that trips a bug, or an error whose code
// proves nothing, waits like any outage, and holds up only its own message).
//
// Isolating k bad units among n costs about 2·k·log2(n/k) applies; with k = 1 in 80,000 that is
// 34 small transactions, a second or two.
import { classifyFailure, isUnavailable, type Failure } from '../lib/infra/storage-errors.js';

export interface Failed<U> {
  unit: U;
  error: unknown;
  failure: Failure;
}

export interface Isolation<U> {
  /** Units storage refused, each alone. */
  failed: Failed<U>[];
  /** Units not isolated within the budget: neither applied for certain nor failed. */
  unresolved: U[];
  /** Applies made (the first, whole-batch one included). */
  applies: number;
  /** The whole batch's error, when it failed (what `unresolved` units failed with). */
  error?: unknown;
}

/**
 * Applies `units`, isolating those storage refuses. Throws the error of a server that refuses as
 * a whole (the caller retries everything not yet acked); everything else ends in `failed`.
 * `explain`: why a unit cannot be stored (its envelope and schema), or null; it must not throw.
 */
export async function applyIsolated<U>(
  units: U[],
  apply: (units: U[]) => Promise<void>,
  explain: (unit: U) => string | null,
  budget = 64,
): Promise<Isolation<U>> {
  const out: Isolation<U> = { failed: [], unresolved: [], applies: 1 };
  let first: unknown;
  try {
    await apply(units);
    return out;
  } catch (e) {
    if (isUnavailable(e)) throw e;
    first = e;
    out.error = e;
  }
  if (units.length === 1) {
    out.failed.push(failedUnit(units[0]!, first, explain));
    return out;
  }

  // Screen: units whose own schema says why.
  const rest: U[] = [];
  for (const u of units) {
    const why = explain(u);
    if (why === null) rest.push(u);
    else out.failed.push({ unit: u, error: first, failure: notStorable(why) });
  }
  if (rest.length === 0) return out;
  if (rest.length < units.length) {
    out.applies++;
    try {
      await apply(rest);
      return out;
    } catch (e) {
      if (isUnavailable(e)) throw e;
      if (rest.length === 1) {
        out.failed.push(failedUnit(rest[0]!, e, explain));
        return out;
      }
    }
  }

  let left = budget;
  const bisect = async (list: U[]): Promise<void> => {
    const mid = list.length >> 1;
    for (const half of [list.slice(0, mid), list.slice(mid)]) {
      if (left <= 0) {
        out.unresolved.push(...half);
        continue;
      }
      left--;
      out.applies++;
      try {
        await apply(half);
      } catch (e) {
        if (isUnavailable(e)) throw e;
        if (half.length === 1) out.failed.push(failedUnit(half[0]!, e, explain));
        else await bisect(half);
      }
    }
  };
  await bisect(rest);
  return out;
}

function failedUnit<U>(unit: U, error: unknown, explain: (u: U) => string | null): Failed<U> {
  const why = explain(unit);
  if (why !== null) return { unit, error, failure: notStorable(why) };
  return { unit, error, failure: classifyFailure(error) };
}

const notStorable = (why: string): Failure => ({ kind: 'data', reason: `not storable: ${why}`, dependency: 'worker', whole: false });
