// E-mail notifications of traffic-light changes (docs/operations.md "E-mail notifications"): the
// subscriptions (`mail_subscriptions`, one per user and customer) as the api manages them and the
// unsubscribe link turns them off; the changes waiting for a digest (`mail_pending`), written with
// the delivery of a change from the light outbox (workers/traffic-light.ts); and what the digest
// job (workers/mail-digest.ts) reads and records. Membership is checked when a change is queued and
// again when its digest is sent: a removed member gets no more mail.
import { withTx, type Pool, type PoolClient } from '../infra/postgres.js';
import type { Lang } from '../infra/mail.js';
import type { MailKind } from '../contract/schemas/notifications.js';
import type { LightEvent } from '../domain/traffic-light.js';
import { mailKind } from '../domain/notifications.js';

export interface Subscription {
  kinds: MailKind[];
  lang: Lang;
}

/** The user's subscription in the customer; null: none yet. */
export async function getSubscription(pool: Pool, userId: string, customerId: string): Promise<Subscription | null> {
  const r = await pool.query<Subscription>('SELECT kinds, lang FROM mail_subscriptions WHERE user_id = $1 AND customer_id = $2', [userId, customerId]);
  return r.rows[0] ?? null;
}

/**
 * Sets the user's subscription in the customer (created with `token` as its unsubscribe token;
 * an existing one keeps its token). Changes of kinds no longer asked for stop waiting. Null when
 * the user is not a member of the customer (a system administrator acting in it, say).
 */
export async function putSubscription(pool: Pool, userId: string, customerId: string, s: Subscription, token: string): Promise<Subscription | null> {
  return withTx(pool, async (c) => {
    const r = await c.query<Subscription>(
      `INSERT INTO mail_subscriptions (user_id, customer_id, kinds, lang, unsubscribe_token)
       SELECT m.user_id, m.customer_id, $3, $4, $5 FROM memberships m WHERE m.user_id = $1 AND m.customer_id = $2
       ON CONFLICT (user_id, customer_id) DO UPDATE SET kinds = EXCLUDED.kinds, lang = EXCLUDED.lang, retry_at = NULL, failures = 0
       RETURNING kinds, lang`,
      [userId, customerId, s.kinds, s.lang, token],
    );
    if (!r.rows[0]) return null;
    await c.query(`DELETE FROM mail_pending WHERE user_id = $1 AND customer_id = $2 AND sent_at IS NULL AND NOT (kind = ANY($3::text[]))`, [userId, customerId, s.kinds]);
    return r.rows[0];
  });
}

/**
 * The unsubscribe link: turns the subscription of `token` off (kinds emptied, waiting changes
 * dropped). Null for an unknown token. Repeating it changes nothing and answers the same.
 */
export async function unsubscribeByToken(pool: Pool, token: string): Promise<{ customer: string; email: string; lang: Lang } | null> {
  return withTx(pool, async (c) => {
    const r = await c.query<{ user_id: string; customer_id: string; customer: string; email: string; lang: Lang }>(
      `UPDATE mail_subscriptions s SET kinds = '{}', retry_at = NULL, failures = 0
         FROM customers cu, users u
        WHERE s.unsubscribe_token = $1 AND cu.id = s.customer_id AND u.id = s.user_id
       RETURNING s.user_id, s.customer_id, COALESCE(NULLIF(cu.name, ''), cu.slug) AS customer, u.email, s.lang`,
      [token],
    );
    const row = r.rows[0];
    if (!row) return null;
    await c.query('DELETE FROM mail_pending WHERE user_id = $1 AND customer_id = $2 AND sent_at IS NULL', [row.user_id, row.customer_id]);
    return { customer: row.customer, email: row.email, lang: row.lang };
  });
}

// ---- the workers' side ----------------------------------------------------------------------

/**
 * Queues the changes for the digests of every subscription that asks for their kind, of members
 * only. Called with the delivery of changes from the light outbox (before they leave it), so a
 * change is queued at least once; a copy of one already queued (or mailed within the last day) is
 * dropped by the key. Marks each subscription with waiting changes (`waiting_since`). Returns the
 * rows queued.
 */
export async function queueMailNotifications(db: Pool | PoolClient, events: LightEvent[]): Promise<number> {
  const rows = events.flatMap((e) => {
    const kind = mailKind(e);
    return kind ? [{ e, kind }] : [];
  });
  if (rows.length === 0) return 0;
  // Only the changes of customers with a subscription go to Postgres: the statement below takes
  // nine arrays of every change, and a batch of 100,000 silent instances of customers without one
  // cost a worker that for nothing, and Postgres a join of every change (bench/README.md "The
  // light's delivery"). A subscription made meanwhile gets the changes recorded after it.
  const customers = [...new Set(rows.map((x) => x.e.customer_id))];
  const subscribed = new Set(
    (await db.query<{ customer_id: string }>(`SELECT DISTINCT customer_id FROM mail_subscriptions WHERE customer_id = ANY($1::uuid[]) AND kinds <> '{}'`, [customers])).rows.map(
      (x) => x.customer_id,
    ),
  );
  const wanted = subscribed.size === customers.length ? rows : rows.filter((x) => subscribed.has(x.e.customer_id));
  if (wanted.length === 0) return 0;
  const col = <T>(f: (x: (typeof rows)[number]) => T) => wanted.map(f);
  const r = await db.query<{ n: number }>(
    `WITH e AS (
       SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::uuid[], $5::text[], $6::text[], $7::text[], $8::text[], $9::timestamptz[])
                AS e(id, customer_id, kind, instance_id, machine, software, from_light, to_light, at)
     ), ins AS (
       INSERT INTO mail_pending (user_id, customer_id, event_id, kind, instance_id, machine, software, from_light, to_light, event_at)
       SELECT s.user_id, s.customer_id, e.id, e.kind, e.instance_id, e.machine, e.software, e.from_light, e.to_light, e.at
         FROM e
         JOIN mail_subscriptions s ON s.customer_id = e.customer_id AND e.kind = ANY(s.kinds)
         JOIN memberships m ON m.user_id = s.user_id AND m.customer_id = s.customer_id
       ON CONFLICT (user_id, customer_id, event_id) DO NOTHING
       RETURNING user_id, customer_id
     ), marked AS (
       UPDATE mail_subscriptions s SET waiting_since = COALESCE(s.waiting_since, now())
         FROM (SELECT DISTINCT user_id, customer_id FROM ins) i
        WHERE s.user_id = i.user_id AND s.customer_id = i.customer_id
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM ins)::int AS n`,
    [
      col((x) => x.e.id),
      col((x) => x.e.customer_id),
      col((x) => x.kind),
      col((x) => x.e.instance_id),
      col((x) => x.e.machine),
      col((x) => x.e.software),
      col((x) => x.e.from),
      col((x) => x.e.to),
      col((x) => x.e.at),
    ],
  );
  return r.rows[0]!.n;
}

const DIGEST_LOCK = 7_401_135; // advisory lock key: "mail digests" (per database)

/** The digest job's session lock on `c`: one sender in the cluster at a time (the send rate is per sender). */
export async function tryMailDigestLock(c: PoolClient): Promise<boolean> {
  return (await c.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [DIGEST_LOCK])).rows[0]!.ok;
}

export async function releaseMailDigestLock(c: PoolClient): Promise<void> {
  await c.query('SELECT pg_advisory_unlock($1)', [DIGEST_LOCK]);
}

export interface DueDigest {
  user_id: string;
  customer_id: string;
}

/**
 * Subscriptions whose digest is due: changes have waited `intervalS`, the last digest was at
 * least `intervalS` ago, and no retry is pending. Fair between customers: the oldest due
 * subscription of each customer first, then the second of each, and so on, so that a customer with
 * many subscribers does not hold back another's mail.
 */
export async function dueDigests(db: Pool | PoolClient, intervalS: number, limit: number): Promise<DueDigest[]> {
  const r = await db.query<DueDigest>(
    `SELECT user_id, customer_id FROM (
       SELECT user_id, customer_id, waiting_since,
              row_number() OVER (PARTITION BY customer_id ORDER BY waiting_since, user_id) AS rn
         FROM mail_subscriptions
        WHERE waiting_since IS NOT NULL AND waiting_since <= now() - make_interval(secs => $1)
          AND (last_sent_at IS NULL OR last_sent_at <= now() - make_interval(secs => $1))
          AND (retry_at IS NULL OR retry_at <= now())
     ) d
     ORDER BY rn, waiting_since, customer_id
     LIMIT $2`,
    [intervalS, limit],
  );
  return r.rows;
}

export interface DigestLine {
  event_id: string;
  kind: MailKind;
  machine: string;
  software: string;
  from_light: string;
  to_light: string;
  event_at: Date;
}

export interface Digest {
  userId: string;
  customerId: string;
  email: string;
  /** The customer's name (its slug when it has none). */
  customer: string;
  slug: string;
  lang: Lang;
  kinds: MailKind[];
  token: string;
  /** Every waiting change, oldest first (what the mail lists, up to its cap, and what is marked sent). */
  lines: DigestLine[];
}

/**
 * What a due subscription's digest holds, or null when there is nothing to send: no waiting
 * changes (then the subscription stops waiting), or the user is no longer a member of the
 * customer (then the subscription and its changes are deleted: a removed member gets no more mail).
 */
export async function loadDigest(pool: Pool, d: DueDigest): Promise<Digest | null> {
  const s = await pool.query<{ email: string; customer: string; slug: string; lang: Lang; kinds: MailKind[]; token: string; member: boolean }>(
    `SELECT u.email, COALESCE(NULLIF(c.name, ''), c.slug) AS customer, c.slug, s.lang, s.kinds, s.unsubscribe_token AS token,
            EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = s.user_id AND m.customer_id = s.customer_id) AS member
       FROM mail_subscriptions s JOIN users u ON u.id = s.user_id JOIN customers c ON c.id = s.customer_id
      WHERE s.user_id = $1 AND s.customer_id = $2`,
    [d.user_id, d.customer_id],
  );
  const sub = s.rows[0];
  if (!sub) return null;
  if (!sub.member) {
    await pool.query('DELETE FROM mail_subscriptions WHERE user_id = $1 AND customer_id = $2', [d.user_id, d.customer_id]);
    return null;
  }
  const lines = (
    await pool.query<DigestLine>(
      `SELECT event_id, kind, machine, software, from_light, to_light, event_at FROM mail_pending
        WHERE user_id = $1 AND customer_id = $2 AND sent_at IS NULL ORDER BY event_at, event_id`,
      [d.user_id, d.customer_id],
    )
  ).rows;
  if (lines.length === 0) {
    await settleWaiting(pool, d, []);
    return null;
  }
  return { userId: d.user_id, customerId: d.customer_id, email: sub.email, customer: sub.customer, slug: sub.slug, lang: sub.lang, kinds: sub.kinds, token: sub.token, lines };
}

/**
 * After a digest was sent (`sentIds`: the changes it held; none: nothing was to send): they are
 * marked sent, the subscription's last send noted, and whether changes still wait (queued while it
 * was being sent) recomputed. The subscription's row is locked first, so a change being queued at
 * the same moment is either seen here or marks the subscription itself after this commits.
 */
export async function settleWaiting(pool: Pool, d: DueDigest, sentIds: string[]): Promise<void> {
  await withTx(pool, async (c) => {
    await c.query('SELECT 1 FROM mail_subscriptions WHERE user_id = $1 AND customer_id = $2 FOR UPDATE', [d.user_id, d.customer_id]);
    if (sentIds.length) {
      await c.query(`UPDATE mail_pending SET sent_at = now() WHERE user_id = $1 AND customer_id = $2 AND event_id = ANY($3::text[]) AND sent_at IS NULL`, [
        d.user_id,
        d.customer_id,
        sentIds,
      ]);
    }
    await c.query(
      `UPDATE mail_subscriptions s SET
         last_sent_at = CASE WHEN $3 THEN now() ELSE s.last_sent_at END, retry_at = NULL, failures = 0,
         waiting_since = (SELECT min(p.created_at) FROM mail_pending p WHERE p.user_id = s.user_id AND p.customer_id = s.customer_id AND p.sent_at IS NULL)
       WHERE s.user_id = $1 AND s.customer_id = $2`,
      [d.user_id, d.customer_id, sentIds.length > 0],
    );
  });
}

/** A send failed: the subscription's digest is tried again after `retryS` (its changes keep waiting). */
export async function digestFailed(pool: Pool, d: DueDigest, retryS: (failures: number) => number): Promise<number> {
  const r = await pool.query<{ failures: number }>(
    `UPDATE mail_subscriptions SET failures = failures + 1 WHERE user_id = $1 AND customer_id = $2 RETURNING failures`,
    [d.user_id, d.customer_id],
  );
  const failures = r.rows[0]?.failures ?? 1;
  await pool.query(`UPDATE mail_subscriptions SET retry_at = now() + make_interval(secs => $3) WHERE user_id = $1 AND customer_id = $2`, [
    d.user_id,
    d.customer_id,
    retryS(failures),
  ]);
  return failures;
}

/**
 * Subscriptions of users who are no longer members of their customer (removed meanwhile) are
 * deleted, their waiting changes with them: a member added again starts without one.
 */
export async function pruneFormerMembers(pool: Pool): Promise<number> {
  const r = await pool.query(
    `DELETE FROM mail_subscriptions s WHERE NOT EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = s.user_id AND m.customer_id = s.customer_id)`,
  );
  return r.rowCount ?? 0;
}

/** Changes mailed more than `keepS` ago are forgotten (in chunks); returns the rows deleted. */
export async function pruneSentMail(pool: Pool, keepS: number, chunk = 5000): Promise<number> {
  let total = 0;
  for (;;) {
    const r = await pool.query(
      `DELETE FROM mail_pending WHERE ctid IN (SELECT ctid FROM mail_pending WHERE sent_at IS NOT NULL AND sent_at < now() - make_interval(secs => $1) LIMIT $2)`,
      [keepS, chunk],
    );
    total += r.rowCount ?? 0;
    if ((r.rowCount ?? 0) < chunk) return total;
  }
}
