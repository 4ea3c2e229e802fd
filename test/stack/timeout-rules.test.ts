// Per-instance timeouts and the late colour through the whole stack (gateway, workers, api, a real
// SMTP server and a webhook receiver of this file's): the api's validation, ownership and quota;
// an instance under a rule turns late at its late time and red at its deadline, each change once,
// with its own webhook delivery and e-mail, while another customer's instance of the same name
// keeps the default; a rule that shortens the timeout of an instance whose heartbeats skip
// Postgres (the worker's copy of its rule is stale) never turns it red while it reports; a rule
// deleted turns a red instance back without a report; a customer changing its rules in a loop gets
// 429 for a change while its last is applied, and another customer's changes go through.
import t from 'tap';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { testStack, get, post, eventually, chRows } from '../helpers/stack.js';
import { request } from '../helpers/http.js';
import { smtpServer } from '../helpers/smtp.js';

const smtp = await smtpServer();
t.teardown(() => smtp.close());
const MIN_S = 2;
const s = await testStack(t, 'tmstack', {
  env: {
    HEARTBEAT_TIMEOUT_S: '60',
    TIMEOUT_RULE_MIN_S: String(MIN_S),
    TIMEOUT_RULES_PER_CUSTOMER: '4',
    PG_HEARTBEAT_INTERVAL_S: '30',
    LIGHT_SWEEP_INTERVAL_MS: '300',
    WEBHOOK_BACKOFF_MS: '200',
    WEBHOOK_ALLOW_CIDRS: '127.0.0.1/32',
    ...smtp.env,
    MAIL_DIGEST_INTERVAL_S: '1',
    MAIL_DIGEST_TICK_MS: '200',
  },
});
const RULES = `${s.apiUrl}/api/timeout-rules`;
const admin = await s.newUser('admin');
const viewer = await s.newUser('viewer');
const other = await s.newCustomer('tmother');
const otherAdmin = await s.newUser('admin', { customer: other.customer });
const ingest = (machine: string, software: string, slug = s.customer.slug) => `${s.gatewayUrl}/api/ingest/${slug}/${machine}/${software}/heartbeat`;
const beat = async (machine: string, software: string, token = s.token, slug = s.customer.slug) => {
  const r = await post(ingest(machine, software, slug), token, {});
  if (r.status !== 200) throw new Error(`heartbeat ${r.status} ${JSON.stringify(r.body)}`);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Inst {
  id: string;
  light: string;
  light_since: string;
  last_heartbeat_at: string;
  timeout_s: number;
  late_percent: number;
  deadline: string | null;
  late_at: string | null;
}

async function find(machine: string, software: string, jwt = admin.jwt): Promise<Inst | undefined> {
  const r = await get(`${s.apiUrl}/api/instances?machine=${machine}&software=${software}`, jwt);
  return r.body.items?.[0];
}
const until = (machine: string, software: string, light: string, ms = 15_000, jwt = admin.jwt) =>
  eventually(async () => {
    const i = await find(machine, software, jwt);
    return i?.light === light ? i : null;
  }, ms, `${machine}/${software} ${light}`);

/** The stored changes of an instance, oldest first. */
async function changes(id: string) {
  return chRows<{ seq: string; from_light: string; to_light: string; at_ms: string }>(
    s.ch,
    `SELECT seq, from_light, to_light, at_ms FROM light_events FINAL WHERE instance_id = '${id}' ORDER BY seq`,
  );
}

const hooks: { body: Record<string, unknown>; headers: IncomingMessage['headers'] }[] = [];
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (d: Buffer) => (body += d.toString()));
  req.on('end', () => {
    hooks.push({ body: JSON.parse(body) as Record<string, unknown>, headers: req.headers });
    res.writeHead(200).end('ok');
  });
});
await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
t.teardown(() => new Promise<void>((r) => receiver.close(() => r())));

t.test('the api: viewers read, admins write; bad input 400; another customer 404; one rule per target; the quota', async (t) => {
  const list = await get(RULES, viewer.jwt);
  t.equal(list.status, 200);
  t.same(list.body, { items: [], defaults: { timeout_s: 60, late_percent: 0 }, min_timeout_s: MIN_S }, 'no rules; the defaults as the workers applied them');
  t.equal((await post(RULES, viewer.jwt, { scope: 'customer', timeout_s: 100 })).status, 403, 'a viewer may not create');
  for (const body of [
    { scope: 'software', timeout_s: 100 },
    { scope: 'customer', software_pattern: 'x*', timeout_s: 100 },
    { scope: 'instance', timeout_s: 100 },
    { scope: 'software', software_pattern: 'x', instance_id: '8c1f8a4e-8a2b-4a8c-9f4e-2f1c2d3e4f50', timeout_s: 100 },
    { scope: 'customer' },
    { scope: 'customer', timeout_s: MIN_S - 1 },
    { scope: 'customer', timeout_s: 2_592_001 },
    { scope: 'customer', late_percent: 100 },
    { scope: 'customer', late_percent: -1 },
    { scope: 'customer', timeout_s: 100, colour: 'blue' },
    { scope: 'software', software_pattern: 'x'.repeat(129), timeout_s: 100 },
    { scope: 'software', software_pattern: '', timeout_s: 100 },
    { scope: 'galaxy', timeout_s: 100 },
  ]) {
    const r = await post(RULES, admin.jwt, body);
    t.equal(r.status, 400, `400 for ${JSON.stringify(body).slice(0, 80)}`);
    t.type(r.body.detail, 'string');
  }
  t.match((await post(RULES, admin.jwt, { scope: 'customer', timeout_s: MIN_S - 1 })).body.detail, /TIMEOUT_RULE_MIN_S/);
  // Another customer's instance: 404, as if it did not exist.
  await beat('o1', 'agent', other.token, other.customer.slug);
  const theirs = await eventually(() => find('o1', 'agent', otherAdmin.jwt), 10_000, "the other customer's instance");
  t.equal((await post(RULES, admin.jwt, { scope: 'instance', instance_id: theirs.id, timeout_s: 100 })).status, 404);
  // One rule per target; the quota (4) counts every rule of the customer.
  const first = await post(RULES, otherAdmin.jwt, { scope: 'customer', timeout_s: 120, description: 'slow fleet' });
  t.equal(first.status, 201);
  t.equal(first.body.instances_changed, 1);
  const dup = await post(RULES, otherAdmin.jwt, { scope: 'customer', timeout_s: 130 });
  t.equal(dup.status, 409);
  t.match(dup.body.detail, first.body.rule.id, 'names the existing rule');
  for (const p of ['q1*', 'q2*', 'q3*']) t.equal((await post(RULES, otherAdmin.jwt, { scope: 'software', software_pattern: p, late_percent: 10 })).status, 201);
  const full = await post(RULES, otherAdmin.jwt, { scope: 'software', software_pattern: 'q4*', late_percent: 10 });
  t.equal(full.status, 409);
  t.match(full.body.detail, /quota/);
  const quotas = await get(`${s.apiUrl}/api/quotas`, otherAdmin.jwt);
  t.same(quotas.body.quotas.timeout_rules.used, 4, 'the quota view counts them');
  // Their rules are theirs: invisible, unchangeable and undeletable for this customer.
  t.same((await get(RULES, admin.jwt)).body.items, []);
  t.equal((await request('PUT', `${RULES}/${first.body.rule.id}`, admin.jwt, { timeout_s: 10 })).status, 404);
  t.equal((await request('DELETE', `${RULES}/${first.body.rule.id}`, admin.jwt)).status, 404);
  const mine = (await get(RULES, otherAdmin.jwt)).body.items as { id: string; scope: string }[];
  for (const r of mine.filter((x) => x.scope === 'software')) t.equal((await request('DELETE', `${RULES}/${r.id}`, otherAdmin.jwt)).status, 204);
  const cleared = await request('PUT', `${RULES}/${first.body.rule.id}`, otherAdmin.jwt, { timeout_s: null });
  t.equal(cleared.status, 400, 'a rule keeps one value');
  // null clears a value (it is not taken for 0), 0 is a value.
  const url = `${RULES}/${first.body.rule.id}`;
  t.equal((await request('PUT', url, otherAdmin.jwt, { late_percent: 0 })).body.rule.late_percent, 0, '0: never late, set');
  const nulled = await request('PUT', url, otherAdmin.jwt, { late_percent: null });
  t.equal(nulled.status, 200);
  t.equal(nulled.body.rule.late_percent, null, 'null: cleared, not 0');
  t.equal((await request('PUT', url, otherAdmin.jwt, { timeout_s: null, late_percent: null })).status, 400, 'both cleared: 400');
  const shown = await find('o1', 'agent', otherAdmin.jwt);
  t.equal(shown?.timeout_s, 120, "the other customer's instance took its customer rule");
});

t.test('late at its late time, red at its deadline, each once, with a webhook and an e-mail; the same name elsewhere keeps the default', async (t) => {
  t.equal((await post(`${s.apiUrl}/api/webhooks`, admin.jwt, { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook` })).status, 201);
  t.equal((await request('PUT', `${s.apiUrl}/api/notifications/email`, admin.jwt, { kinds: ['late', 'red', 'green'], lang: 'en' })).status, 200);
  const rule = await post(RULES, admin.jwt, { scope: 'software', software_pattern: 'fast-*', timeout_s: 3, late_percent: 50, description: 'kiosk' });
  t.equal(rule.status, 201);
  t.equal(rule.body.instances_changed, 0, 'no instance matches yet');
  await beat('k1', 'fast-1');
  await beat('k1', 'fast-1', other.token, other.customer.slug);
  const green = await until('k1', 'fast-1', 'green');
  t.equal(green.timeout_s, 3, 'a new instance took the rule');
  t.equal(green.late_percent, 50);
  t.equal(Date.parse(green.deadline!) - Date.parse(green.last_heartbeat_at), 3000, 'deadline = last heartbeat + 3 s');
  t.equal(Date.parse(green.late_at!) - Date.parse(green.last_heartbeat_at), 1500, 'late time = last heartbeat + 1.5 s');

  const late = await until('k1', 'fast-1', 'late', 10_000);
  t.equal(Date.parse(late.light_since), Date.parse(green.late_at!), 'late since its late time');
  const red = await until('k1', 'fast-1', 'red', 10_000);
  t.equal(Date.parse(red.light_since), Date.parse(green.deadline!), 'red since its deadline');
  const ev = await eventually(async () => {
    const c = await changes(green.id);
    return c.length >= 3 ? c : null;
  }, 10_000, 'three changes in ClickHouse');
  t.same(ev.map((e) => `${e.from_light}>${e.to_light}`), ['grey>green', 'green>late', 'late>red'], 'each change once, in order');
  t.equal(Number(ev[1]!.at_ms), Date.parse(green.late_at!), 'turned late exactly at its late time');
  t.equal(Number(ev[2]!.at_ms), Date.parse(green.deadline!), 'turned red exactly at its deadline');

  const delivered = await eventually(async () => {
    const mine = hooks.filter((h) => h.body.instance_id === green.id);
    return mine.length >= 2 ? mine : null;
  }, 10_000, 'two webhook deliveries');
  t.same(delivered.map((h) => `${String(h.body.from)}>${String(h.body.to)}`).sort(), ['green>late', 'late>red'], 'the webhook hears of late, then of red');
  const mail = await eventually(async () => smtp.mailsTo(admin.email).find((m) => /late/.test(m.text)), 15_000, 'a mail naming late');
  t.match(mail.text, /k1 \/ fast-1/);

  const theirs = await find('k1', 'fast-1', otherAdmin.jwt);
  t.equal(theirs?.light, 'green', "the other customer's fast-1 is green: its timeout is its own (120 s)");
  t.equal(theirs?.timeout_s, 120);

  await beat('k1', 'fast-1');
  await until('k1', 'fast-1', 'green');
  await eventually(() => Promise.resolve(hooks.some((h) => h.body.instance_id === green.id && h.body.to === 'green')), 10_000, 'the recovery delivered');
  t.equal(hooks.filter((h) => h.body.instance_id === green.id).length, 3, 'one delivery per change');
});

t.test('a shortened timeout never turns a reporting instance red, although its heartbeats skip Postgres; silent, it turns red at its new deadline', async (t) => {
  let on = true;
  const loop = (async () => {
    while (on) {
      await beat('s1', 'steady');
      await sleep(250);
    }
  })();
  const before = await until('s1', 'steady', 'green');
  t.equal(before.timeout_s, 60);
  await sleep(1000);
  // The workers hold this instance's rule as "none" (60 s, Postgres every 30 s) until their copy
  // expires: the deadline Postgres holds passes again and again while it reports.
  const made = await post(RULES, admin.jwt, { scope: 'instance', instance_id: before.id, timeout_s: MIN_S });
  t.equal(made.status, 201);
  t.match(made.body.rule, { instance_id: before.id, machine: 's1', software: 'steady' }, "the rule names its instance's machine and software");
  t.match((await get(RULES, admin.jwt)).body.items.find((r: { id: string }) => r.id === made.body.rule.id), { machine: 's1', software: 'steady' }, 'so does the list');
  t.equal(made.body.instances_changed, 1);
  await sleep(6000);
  const seen = await find('s1', 'steady');
  t.equal(seen?.light, 'green', 'still green while it reports');
  t.equal(Date.parse(seen!.deadline!) - Date.parse(seen!.last_heartbeat_at), MIN_S * 1000, 'its deadline follows its newest heartbeat');
  t.same((await changes(before.id)).map((e) => e.to_light), ['green'], 'no change recorded while it reported');
  on = false;
  await loop;
  await sleep(700); // the last heartbeat applied (its 200 came when JetStream had it)
  const last = await find('s1', 'steady');
  t.equal(last?.light, 'green', 'not red yet');
  const recorded = await eventually(async () => {
    const c = await changes(before.id);
    return c.length >= 2 ? c : null;
  }, 10_000, 'red recorded');
  t.same(recorded.map((e) => e.to_light), ['green', 'red']);
  t.equal(Number(recorded[1]!.at_ms), Date.parse(last!.last_heartbeat_at) + MIN_S * 1000, 'red at the last heartbeat + the new timeout');
  const red = await until('s1', 'steady', 'red');
  t.equal(Date.parse(red.light_since), Number(recorded[1]!.at_ms));

  // The rule deleted: the default (60 s) puts the deadline in the future, and the sweep turns it
  // back without a report.
  const del = await request('DELETE', `${RULES}/${made.body.rule.id}`, admin.jwt);
  t.equal(del.status, 204);
  const back = await until('s1', 'steady', 'green', 10_000);
  t.equal(back.timeout_s, 60);
  const ev = await eventually(async () => {
    const c = await changes(before.id);
    return c.length >= 3 ? c : null;
  }, 10_000, 'the change back recorded');
  t.same(ev.map((e) => e.to_light), ['green', 'red', 'green']);
  t.ok(Number(ev[2]!.at_ms) > Date.parse(red.light_since), 'changed back when judged, after it turned red');
});

t.test("a customer changing its rules in a loop: one change at a time per api replica (429 at once, nothing held); another customer's change goes through meanwhile", async (t) => {
  const theirRule = ((await get(RULES, otherAdmin.jwt)).body.items as { id: string; scope: string }[]).find((r) => r.scope === 'customer')!;
  const hold = await s.pool.connect();
  let first: Promise<{ status: number; body: any }> | null = null;
  try {
    await hold.query('BEGIN');
    // A rule change locks its customer's row first; held here, the first change waits inside.
    await hold.query('SELECT 1 FROM customers WHERE id = $1 FOR UPDATE', [s.customer.id]);
    first = post(RULES, admin.jwt, { scope: 'software', software_pattern: 'loop-*', timeout_s: 100 });
    await eventually(async () => {
      const r = await s.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM customers WHERE id = $1 FOR UPDATE%'`,
      );
      return r.rows[0].n >= 1;
    }, 10_000, 'the first change waits on the lock');
    const again = await post(RULES, admin.jwt, { scope: 'software', software_pattern: 'loop2-*', timeout_s: 100 });
    t.equal(again.status, 429, 'a second change of the same customer: 429 at once');
    t.equal(again.headers.get('retry-after'), '1');
    t.match(again.body.detail, /being applied/);
    t.equal((await request('PUT', `${RULES}/${theirRule.id}`, admin.jwt, { timeout_s: 100 })).status, 429, 'PUT too, before it looks for the rule');
    t.equal((await request('DELETE', `${RULES}/${theirRule.id}`, admin.jwt)).status, 429, 'DELETE too');
    const theirs = await request('PUT', `${RULES}/${theirRule.id}`, otherAdmin.jwt, { timeout_s: 150 });
    t.equal(theirs.status, 200, "another customer's change is not held up");
    await hold.query('COMMIT');
  } finally {
    hold.release();
  }
  const made = await first!;
  t.equal(made.status, 201, 'the first change went through once the lock was free');
  const next = await post(RULES, admin.jwt, { scope: 'software', software_pattern: 'loop2-*', timeout_s: 100 });
  t.equal(next.status, 201, 'free again once it finished');
  for (const id of [made.body.rule.id, next.body.rule.id]) t.equal((await request('DELETE', `${RULES}/${id}`, admin.jwt)).status, 204);
});
