// `fleet timeout-rule list|add|set|delete` against the real Postgres, with instances a worker
// stored: each change is checked on the instance rows it must move (timeout_s, late_percent,
// deadline and late_at against last_heartbeat_at) and the refusals leave the rules as they were.
// Another customer's instances and rules are out of reach by slug.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { testStack, eventually } from '../helpers/stack.js';
import { ROOT } from '../../deploy/service-process.js';

const s = await testStack(t, 'trcli', { api: false });
const slug = s.customer.slug;

function fleet(...args: string[]) {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

interface Row {
  timeout_s: number | null;
  late_percent: number | null;
  /** deadline - last_heartbeat_at, seconds. */
  dl: number;
  /** late_at - last_heartbeat_at, seconds (null: never late). */
  la: number | null;
}
/** The rule values and times stored on each instance of a customer, by machine/software. */
async function rows(customerId = s.customer.id): Promise<Record<string, Row>> {
  const r = await s.pool.query(
    `SELECT machine || '/' || software AS k, timeout_s, late_percent,
            extract(epoch FROM deadline - last_heartbeat_at)::float8 AS dl, extract(epoch FROM late_at - last_heartbeat_at)::float8 AS la
       FROM instances WHERE customer_id = $1`,
    [customerId],
  );
  return Object.fromEntries(r.rows.map((x) => [x.k, { timeout_s: x.timeout_s, late_percent: x.late_percent, dl: x.dl, la: x.la }]));
}
const ruleCount = async (customerId = s.customer.id) => (await s.pool.query('SELECT count(*)::int AS n FROM timeout_rules WHERE customer_id = $1', [customerId])).rows[0].n as number;

// No assertion outside a subtest: tap would end the file there.
const other = await s.newCustomer('trcli-other');
for (const [m, sw] of [
  ['batch-1', 'backup'],
  ['kiosk-1', 'agent'],
  ['kiosk-2', 'agent'],
]) {
  const r = await s.report(m!, 'heartbeat', {}, { software: sw });
  if (r.status !== 200) throw new Error(`heartbeat ${m}: ${r.status}`);
}
const o = await s.report('foreign-1', 'heartbeat', {}, { customer: other.customer.slug, token: other.token });
if (o.status !== 200) throw new Error(`heartbeat foreign-1: ${o.status}`);
await eventually(async () => Object.keys(await rows()).length === 3 && Object.keys(await rows(other.customer.id)).length === 1, 15_000, 'four instances stored');
const foreignId = (await s.pool.query('SELECT id FROM instances WHERE customer_id = $1', [other.customer.id])).rows[0].id as string;
const ids: Record<string, string> = {};

t.test('add: a software pattern, then the whole customer, then one instance; each moves its instances at once', async (t) => {
  const before = await rows();
  t.same(before['kiosk-1/agent'], { timeout_s: null, late_percent: null, dl: 300, la: null }, 'no rule: the defaults (300 s, never late)');

  const sw = fleet('timeout-rule', 'add', slug, '--software', 'back*', '--timeout', '2h', '--late', '50', '--description', 'nightly backups');
  t.equal(sw.code, 0, sw.err);
  const a = JSON.parse(sw.out);
  t.match(a, { rule: { scope: 'software', software_pattern: 'back*', instance_id: null, timeout_s: 7200, late_percent: 50, description: 'nightly backups' }, instances_changed: 1 });
  ids.software = a.rule.id;
  t.same((await rows())['batch-1/backup'], { timeout_s: 7200, late_percent: 50, dl: 7200, la: 3600 }, 'the backup: 2 h, late after 1 h');

  const cw = fleet('timeout-rule', 'add', slug, '--customer-wide', '--late', '80');
  t.equal(cw.code, 0, cw.err);
  const b = JSON.parse(cw.out);
  t.match(b, { rule: { scope: 'customer', timeout_s: null, late_percent: 80, description: '' }, instances_changed: 2 });
  ids.customer = b.rule.id;
  const r = await rows();
  t.same(r['kiosk-2/agent'], { timeout_s: null, late_percent: 80, dl: 300, la: 240 }, 'a kiosk: the default timeout, late at 80 %');
  t.same(r['batch-1/backup'], { timeout_s: 7200, late_percent: 50, dl: 7200, la: 3600 }, 'the pattern is more specific: the backup keeps 50 %');

  const one = fleet('timeout-rule', 'add', slug, '--instance', 'kiosk-1/agent', '--timeout', '90');
  t.equal(one.code, 0, one.err);
  const c = JSON.parse(one.out);
  t.match(c, { rule: { scope: 'instance', timeout_s: 90, late_percent: null }, instances_changed: 1 });
  ids.instance = c.rule.id;
  ids.kiosk1 = c.rule.instance_id;
  t.same((await rows())['kiosk-1/agent'], { timeout_s: 90, late_percent: 80, dl: 90, la: 72 }, "kiosk-1: its own timeout, the customer's late share");
  t.same((await rows(other.customer.id))['foreign-1/agent'], { timeout_s: null, late_percent: null, dl: 300, la: null }, "another customer's instance is untouched");

  const byId = fleet('timeout-rule', 'add', slug, '--instance', ids.kiosk1!.toUpperCase(), '--late', '10');
  t.equal(byId.code, 1, 'an instance given by id (any case) is the same target');
  t.match(byId.err, `a rule for this target exists already (${ids.instance})`);
});

t.test('add refuses what the api refuses, and writes nothing', async (t) => {
  const n = await ruleCount();
  const refused: [string[], RegExp | string][] = [
    [['--customer-wide', '--software', 'x*', '--timeout', '60'], 'give exactly one of --customer-wide, --software <glob>, --instance <id>'],
    [['--timeout', '60'], 'give exactly one of'],
    [['--software', 'kiosk-*'], 'a rule sets --timeout, --late or both'],
    [['--software', 'kiosk-*', '--timeout', '29'], /--timeout "29": seconds from 30 \(TIMEOUT_RULE_MIN_S\) to 2592000/],
    [['--software', 'kiosk-*', '--timeout', '31d'], /--timeout "31d"/],
    [['--software', 'kiosk-*', '--timeout', 'soon'], /--timeout "soon"/],
    [['--software', 'kiosk-*', '--late', '100'], /--late "100": a whole per cent from 0 \(never late\) to 99/],
    [['--software', 'x'.repeat(129), '--late', '5'], '--software: a pattern of 1 to 128 characters'],
    [['--customer-wide', '--timeout', '60'], `a rule for this target exists already (${ids.customer}): change it with fleet timeout-rule set ${slug} ${ids.customer}`],
    [['--software', 'back*', '--timeout', '60'], `exists already (${ids.software})`],
    [['--instance', 'nosuch/agent', '--timeout', '60'], `no instance nosuch/agent of ${slug}`],
    [['--instance', 'kiosk-1', '--timeout', '60'], `no instance kiosk-1 of ${slug}: give its id or machine/software`],
    [['--instance', foreignId, '--timeout', '60'], `no instance ${foreignId} of ${slug}`],
  ];
  for (const [args, msg] of refused) {
    const r = fleet('timeout-rule', 'add', slug, ...args);
    t.equal(r.code, 1, `refused: ${args.join(' ')}`);
    t.match(r.err, msg);
  }
  t.match(fleet('timeout-rule', 'add', 'no-such-customer', '--customer-wide', '--late', '5').err, 'no customer no-such-customer');
  t.equal(await ruleCount(), n, 'no rule written');
  t.equal(await ruleCount(other.customer.id), 0, 'nor for the other customer');

  // The quota: three rules held, three allowed.
  t.equal(fleet('quota', 'set', slug, '--timeout-rules', '3').code, 0);
  const full = fleet('timeout-rule', 'add', slug, '--software', 'kiosk-*', '--timeout', '60');
  t.equal(full.code, 1);
  t.match(full.err, `${slug} has 3 timeout rules, its quota (timeout_rules = 3); delete one first`);
  t.equal(await ruleCount(), n);
  t.equal(fleet('quota', 'set', slug, '--timeout-rules', 'default').code, 0);
});

t.test('list: tab-separated with the targets named, and as JSON', async (t) => {
  const l = fleet('timeout-rule', 'list', slug);
  t.equal(l.code, 0, l.err);
  t.same(l.out.trimEnd().split('\n'), [
    [ids.customer, 'customer', '*', '-', '80', '-'].join('\t'),
    [ids.software, 'software', 'back*', '7200', '50', 'nightly backups'].join('\t'),
    [ids.instance, 'instance', `kiosk-1/agent (${ids.kiosk1})`, '90', '-', '-'].join('\t'),
  ], 'customer, patterns, instances');
  t.match(l.err, '3 rule(s); without one: timeout 300 s, late 0 %');
  const j = fleet('timeout-rule', 'list', slug, '--json');
  t.equal(j.code, 0, j.err);
  const body = JSON.parse(j.out);
  t.same(body.defaults, { timeout_s: 300, late_percent: 0 });
  t.equal(body.min_timeout_s, 30);
  t.same(body.items.map((r: { id: string }) => r.id), [ids.customer, ids.software, ids.instance]);
  t.match(body.items[1], { scope: 'software', created_at: /^\d{4}-\d\d-\d\dT/ });
  const o = fleet('timeout-rule', 'list', other.customer.slug);
  t.equal(o.out, '', "the other customer's list is empty");
});

t.test('set: change, clear one value, refuse clearing both; the instances follow', async (t) => {
  const late = fleet('timeout-rule', 'set', slug, ids.customer!, '--late', '25', '--description', 'kiosks');
  t.equal(late.code, 0, late.err);
  t.match(JSON.parse(late.out), { rule: { id: ids.customer, late_percent: 25, timeout_s: null, description: 'kiosks' }, instances_changed: 2 });
  t.same((await rows())['kiosk-2/agent'], { timeout_s: null, late_percent: 25, dl: 300, la: 75 });
  t.same((await rows())['kiosk-1/agent'], { timeout_s: 90, late_percent: 25, dl: 90, la: 22.5 });

  const clear = fleet('timeout-rule', 'set', slug, ids.software!, '--timeout', 'none');
  t.equal(clear.code, 0, clear.err);
  t.match(JSON.parse(clear.out), { rule: { timeout_s: null, late_percent: 50, description: 'nightly backups' }, instances_changed: 1 });
  t.same((await rows())['batch-1/backup'], { timeout_s: null, late_percent: 50, dl: 300, la: 150 }, 'the backup falls back to the default timeout, keeps its late share');

  const both = fleet('timeout-rule', 'set', slug, ids.software!, '--late', 'none');
  t.equal(both.code, 1);
  t.match(both.err, 'a rule keeps --timeout, --late or both: delete it instead');
  t.match(fleet('timeout-rule', 'set', slug, ids.software!).err, 'nothing to change');
  t.match(fleet('timeout-rule', 'set', slug, ids.software!, '--timeout', '10').err, /--timeout "10": seconds from 30/);
  t.match(fleet('timeout-rule', 'set', slug, 'not-a-uuid', '--late', '5').err, 'the rule id is a UUID');
  const foreign = fleet('timeout-rule', 'set', other.customer.slug, ids.software!, '--late', '5');
  t.equal(foreign.code, 1);
  t.match(foreign.err, `no timeout rule ${ids.software} of ${other.customer.slug}`, "another customer's slug does not reach this rule");
  t.match((await s.pool.query('SELECT late_percent FROM timeout_rules WHERE id = $1', [ids.software])).rows[0], { late_percent: 50 }, 'unchanged');
});

t.test('delete: the instances fall back at once; twice says so', async (t) => {
  t.equal(fleet('timeout-rule', 'delete', other.customer.slug, ids.instance!).code, 1, "not through another customer's slug");
  const d = fleet('timeout-rule', 'delete', slug, ids.instance!);
  t.equal(d.code, 0, d.err);
  t.equal(d.out, `deleted ${ids.instance}\t1 instance(s) changed\n`);
  t.same((await rows())['kiosk-1/agent'], { timeout_s: null, late_percent: 25, dl: 300, la: 75 }, 'kiosk-1: the default timeout, the customer rule still sets late');
  const again = fleet('timeout-rule', 'delete', slug, ids.instance!);
  t.equal(again.code, 1);
  t.match(again.err, `no timeout rule ${ids.instance} of ${slug}`);
  t.equal(fleet('timeout-rule', 'delete', slug, ids.customer!).code, 0);
  t.equal(fleet('timeout-rule', 'delete', slug, ids.software!).code, 0);
  t.equal(await ruleCount(), 0);
  const r = await rows();
  for (const k of Object.keys(r)) t.same(r[k], { timeout_s: null, late_percent: null, dl: 300, la: null }, `${k}: the defaults again`);
});
