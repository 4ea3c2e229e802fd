// Queueing traffic-light changes for the e-mail digests (lib/store/mail-notifications.ts
// queueMailNotifications) with changes of several customers in one delivery, as the expiry
// listener and the sweep deliver them: only the changes of customers with a subscription reach
// the insert, and a subscribed customer's changes are queued whatever other customers share the
// batch; a batch with no subscribed customer sends Postgres nothing but one small read.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';
import { createUser, addMembership } from '../../lib/store/accounts.js';
import { createCustomer } from '../../lib/store/customers.js';
import { putSubscription, queueMailNotifications } from '../../lib/store/mail-notifications.js';
import { lightEventId, type LightEvent } from '../../lib/domain/traffic-light.js';
import type { Pool } from '../../lib/infra/postgres.js';

const s = await testStack(t, 'mailqueue', { gateway: false, worker: false, api: false });

async function customerWith(name: string, kinds: ('red' | 'yellow' | 'green')[] | null) {
  const c = await createCustomer(s.pool, `${name}-${s.id}`);
  const u = await createUser(s.pool, { email: `${name}-${s.id}@example.com`, password: 'pw-unused-here-1' });
  await addMembership(s.pool, u.id, c.id, 'viewer');
  if (kinds) await putSubscription(s.pool, u.id, c.id, { kinds, lang: 'en' }, randomUUID());
  return { c, u };
}
const events = (customer: { id: string; slug: string }, n: number, to: LightEvent['to'] = 'red'): LightEvent[] =>
  Array.from({ length: n }, (_, i) => {
    const instance = randomUUID();
    return {
      id: lightEventId(instance, 2),
      seq: 2,
      customer_id: customer.id,
      customer: customer.slug,
      instance_id: instance,
      machine_id: randomUUID(),
      machine: `m-${i}`,
      software: 'agent',
      from: 'green',
      to,
      reason: 'no heartbeat for 300 s',
      cause: 'expiry',
      at: new Date().toISOString(),
      recorded_at: new Date().toISOString(),
    };
  });
const spy = (statements: string[]) => ({ query: (q: string, v: unknown[]) => (statements.push(q), s.pool.query(q, v)) }) as unknown as Pool;
const queued = async (userId: string) => (await s.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM mail_pending WHERE user_id = $1', [userId])).rows[0]!.n;

const subscribed = await customerWith('subscribed', ['red']);
const off = await customerWith('off', []); // subscribed once, then every kind turned off
const none = await customerWith('none', null);
const yellowOnly = await customerWith('yellow', ['yellow']);

t.test("one delivery of four customers' changes: the subscribed customer's red queued, nobody else's", async (t) => {
  const statements: string[] = [];
  const batch = [...events(none.c, 3000), ...events(subscribed.c, 40), ...events(off.c, 500), ...events(yellowOnly.c, 200)];
  t.equal(await queueMailNotifications(spy(statements), batch), 40, 'the 40 red changes of the subscribed customer');
  t.equal(await queued(subscribed.u.id), 40);
  t.equal(await queued(off.u.id), 0, 'a subscription with every kind off: nothing');
  t.equal(await queued(none.u.id), 0);
  t.equal(await queued(yellowOnly.u.id), 0, 'yellow asked, red sent: nothing');
  t.equal(statements.length, 2, 'the read of who is subscribed, then the insert');
  t.equal(await queueMailNotifications(s.pool, batch), 0, 'the same delivery again queues no copy');
  t.equal(await queued(subscribed.u.id), 40);
});

t.test('a delivery of customers none of whom is subscribed: one small read, no insert', async (t) => {
  const statements: string[] = [];
  t.equal(await queueMailNotifications(spy(statements), [...events(none.c, 5000), ...events(off.c, 100)]), 0);
  t.equal(statements.length, 1, 'one statement');
  t.match(statements[0], /^SELECT DISTINCT customer_id FROM mail_subscriptions/, '… the read of who is subscribed, not the insert of every change');
  t.equal(await queued(none.u.id), 0);
});

t.test('changes no digest mails (grey to yellow, green to green) send nothing at all', async (t) => {
  const statements: string[] = [];
  t.equal(await queueMailNotifications(spy(statements), events(subscribed.c, 10, 'grey')), 0);
  t.same(statements, [], 'not even the read');
});
