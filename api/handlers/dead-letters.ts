// The dead-letter stream for system administrators: list (filters: customer, since, reason), show
// one, replay. The work is lib/store/dead-letters.ts's, shared with `fleet dead-letters`. The stream is
// read over NATS, which the api connects to in the background: until it has, these answer 503.
import type { ApiDeps, HandlersOf } from '../types.js';
import { anyPrincipal } from '../auth.js';
import { HttpError, badRequest, notFound } from '../../lib/contract/errors.js';
import { DeadLetterInputError, parseSince, type DeadLetterFilter, type DeadLetters } from '../../lib/store/dead-letters.js';

/** nats.js error codes that mean NATS, not the request: answered 503. */
const NATS_AWAY = new Set(['TIMEOUT', '503', 'CONNECTION_CLOSED', 'CONNECTION_DRAINING', 'DISCONNECT', 'CONNECTION_REFUSED']);

export function deadLetterHandlers(d: ApiDeps): HandlersOf<'list_dead_letters' | 'get_dead_letter' | 'replay_dead_letters'> {
  /** The dead letters, or 503 while NATS is not connected; NATS failing meanwhile is a 503 too. */
  async function withStore<T>(fn: (s: DeadLetters) => Promise<T>): Promise<T> {
    const s = d.deadLetters();
    if (!s) throw new HttpError(503, 'NATS is not reachable: the dead-letter stream cannot be read now', { retryAfterS: 2 });
    try {
      return await fn(s);
    } catch (e) {
      if (e instanceof HttpError) throw e;
      if (e instanceof DeadLetterInputError) throw badRequest(e.message);
      if (NATS_AWAY.has(String((e as { code?: unknown })?.code))) throw new HttpError(503, `NATS did not answer (${(e as Error).message})`, { retryAfterS: 2 });
      throw e;
    }
  }
  const filter = (q: { customer?: string; since?: string; reason?: string }): DeadLetterFilter => {
    try {
      return { customer: q.customer, since: q.since === undefined ? undefined : parseSince(q.since), reason: q.reason };
    } catch (e) {
      if (e instanceof DeadLetterInputError) throw badRequest(e.message);
      throw e;
    }
  };

  return {
    async list_dead_letters(req) {
      const q = req.query;
      const f = filter(q);
      return withStore((s) => s.list({ ...f, afterSeq: q.after_seq, limit: q.limit }));
    },
    async get_dead_letter(req) {
      const seq = req.params.seq;
      const r = await withStore((s) => s.show(seq));
      if (!r) throw notFound(`no dead letter ${seq}: replayed already, expired (30 days) or never there`);
      return r;
    },
    async replay_dead_letters(req) {
      const b = req.body;
      const f = filter(b);
      const chosen = (b.seqs?.length ?? 0) > 0 || f.customer !== undefined || f.since !== undefined || f.reason !== undefined || b.all === true;
      if (!chosen) throw badRequest('say which dead letters: seqs, a filter (customer, since, reason), or all: true');
      const r = await withStore((s) => s.replay({ ...f, seqs: b.seqs, all: b.all, afterSeq: b.after_seq }, { dryRun: b.dry_run, limit: b.limit }));
      if (!r.dry_run) {
        const p = anyPrincipal(req);
        d.log.info({ user: p.email, summary: r.summary, seqs: r.items.map((i) => i.seq).slice(0, 100) }, 'dead letters replayed');
      }
      return r;
    },
  };
}
