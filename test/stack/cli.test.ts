// The `fleet` command line against the real Postgres and ClickHouse.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { testStack, post, eventually } from '../helpers/stack.js';
import { ROOT } from '../../deploy/service-process.js';

const s = await testStack(t, 'cli', { worker: false, api: false });

function fleet(...args: string[]) {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], { env: { ...process.env, ...s.env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

t.test('migrate is idempotent', async (t) => {
  const r = fleet('migrate');
  t.equal(r.code, 0, r.err);
  t.match(r.out, /schema up to date/);
});

t.test('customer create, token create/list/revoke', async (t) => {
  const slug = `acme-${s.id}`;
  const c = fleet('customer', 'create', slug, '--name', 'ACME');
  t.equal(c.code, 0, c.err);
  t.match(c.out, new RegExp(`\\t${slug}`));
  t.equal(fleet('customer', 'create', slug).code, 1, 'a second customer with the slug is refused');
  t.match(fleet('customer', 'create', 'Bad Slug').err, /invalid customer slug/);

  const tok = fleet('token', 'create', slug, '--name', 'line 1');
  t.equal(tok.code, 0, tok.err);
  const token = tok.out.trim();
  t.match(token, /^fk_[A-Za-z0-9_-]{43}$/, 'the token is printed once');
  t.match(tok.err, /shown only now/);

  const list = fleet('token', 'list', slug);
  t.equal(list.code, 0);
  t.notMatch(list.out, token, 'listing never shows the token');
  t.match(list.out, /line 1/);
  const id = list.out.split('\t')[0]!;

  const url = `${s.gatewayUrl}/api/ingest/${slug}/m/agent/heartbeat`;
  await eventually(async () => (await post(url, token, {})).status === 200, 5000, 'new token accepted');
  const rev = fleet('token', 'revoke', id);
  t.equal(rev.code, 0, rev.err);
  await eventually(async () => (await post(url, token, {})).status === 403, 5000, 'revoked token refused');
  t.match(fleet('token', 'list', slug).out, /revoked/);
  t.equal(fleet('token', 'revoke', id).code, 1, 'revoking twice says so');
  t.equal(fleet('token', 'create', 'no-such-customer').code, 1);
});

t.test('token create: ingest scope by default, a machine binding, an expiry', async (t) => {
  const slug = `bound-${s.id}`;
  t.equal(fleet('customer', 'create', slug).code, 0);
  const plain = fleet('token', 'create', slug, '--name', 'agents');
  t.equal(plain.code, 0, plain.err);
  const bound = fleet('token', 'create', slug, '--name', 'rack 1', '--machine', 'rack1-*', '--expires', '90d');
  t.equal(bound.code, 0, bound.err);
  const rows = (await s.pool.query(`SELECT t.name, t.scopes, t.machine, t.expires_at, t.created_by FROM api_tokens t JOIN customers c ON c.id = t.customer_id WHERE c.slug = $1 ORDER BY t.name`, [slug])).rows;
  t.same(rows.map((r) => [r.name, r.scopes, r.machine, r.created_by]), [['agents', ['ingest'], null, null], ['rack 1', ['ingest'], 'rack1-*', null]], 'ingest only unless told; the CLI is no dashboard user');
  t.equal(rows[0].expires_at, null);
  t.ok(Math.abs(rows[1].expires_at.getTime() - Date.now() - 90 * 86_400_000) < 3600_000, 'expires in 90 days');
  const list = fleet('token', 'list', slug).out;
  t.match(list, /machine rack1-\*\texpires \d{4}-/);
  t.match(list, /any machine\tno expiry\tnever used/);

  const token = bound.out.trim();
  const as = (m: string) => post(`${s.gatewayUrl}/api/ingest/${slug}/${m}/agent/heartbeat`, token, {});
  await eventually(async () => (await as('rack1-a')).status === 200, 5000, 'bound token accepted for its machines');
  t.equal((await as('rack2-a')).status, 403, 'and refused for others');

  t.match(fleet('token', 'create', slug, '--machine', 'm1', '--scopes', 'ingest,read').err, /ingest scope only/);
  t.match(fleet('token', 'create', slug, '--machine', 'Rack 1').err, /machine slug or a pattern/);
  t.match(fleet('token', 'create', slug, '--expires', 'soon').err, /neither an ISO 8601 time/);
  t.match(fleet('token', 'create', slug, '--expires', '2001-01-01T00:00:00Z').err, /must lie in the future/);
});

t.test('user add-to-customer keeps the rule of the dashboard: the last owner cannot be demoted', async (t) => {
  const slug = `owned-${s.id}`;
  t.equal(fleet('customer', 'create', slug).code, 0);
  t.equal(fleet('user', 'create', '--email', `boss-${s.id}@example.com`, '--password', 'a long enough password').code, 0);
  t.equal(fleet('user', 'add-to-customer', `boss-${s.id}@example.com`, slug, '--role', 'owner').code, 0);
  const demote = fleet('user', 'add-to-customer', `boss-${s.id}@example.com`, slug, '--role', 'viewer');
  t.equal(demote.code, 1);
  t.match(demote.err, /the last owner cannot be demoted/);
  const r = await s.pool.query(`SELECT m.role FROM memberships m JOIN customers c ON c.id = m.customer_id WHERE c.slug = $1`, [slug]);
  t.same(r.rows, [{ role: 'owner' }], 'still the owner');
});
