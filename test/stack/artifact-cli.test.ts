// `fleet upload`: stops after --max-chunks (as an interrupted upload would), resumes from the
// gateway's artifact-status on the next run, and the artifact downloads byte-identical.
import t from 'tap';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testStack, get, eventually } from '../helpers/stack.js';
import { ROOT } from '../../deploy/service-process.js';

const CHUNK = 256 * 1024;
const s = await testStack(t, 'artcli', { env: { ARTIFACT_CHUNK_BYTES: String(CHUNK) } });
const dir = mkdtempSync(join(tmpdir(), 'fleet-upload-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const cache = join(dir, 'cache');
const file = join(dir, 'crash report.bin');
const data = randomBytes(9 * CHUNK + 123); // 10 chunks
writeFileSync(file, data);

function fleet(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin', 'fleet.js'), ...args], {
      env: { ...process.env, ...s.env, XDG_CACHE_HOME: cache, FLEET_URL: s.gatewayUrl, ...env },
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('close', (code) => resolve({ code, out, err }));
  });
}

const target = ['--customer', s.customer.slug, '--machine', 'm1', '--software', 'agent'];

t.test('interrupted, then resumed: only the missing chunks are sent; the download is byte-identical', async (t) => {
  const first = await fleet(['upload', ...target, '--max-chunks', '4', file], { FLEET_TOKEN: s.token });
  t.equal(first.code, 3, first.err);
  t.match(first.err, /stopped with 6 chunks still to send/);
  const states = readdirSync(join(cache, 'fleet', 'uploads'));
  t.equal(states.length, 1, 'the upload id is remembered in the cache folder');

  const second = await fleet(['upload', ...target, '--token', s.token, '--parallel', '3', file]);
  t.equal(second.code, 0, second.err);
  t.match(second.err, /resuming upload [0-9a-f-]{36}: 4 of 10 chunks already there/);
  t.match(second.err, /6 chunks sent \(resumed\)/);
  const artifactId = second.out.trim();
  t.match(artifactId, /^[0-9a-f-]{36}$/);
  t.same(readdirSync(join(cache, 'fleet', 'uploads')), [], 'state removed once complete');

  const r = await eventually(async () => {
    const x = await fetch(`${s.apiUrl}/api/artifacts/${artifactId}/download`, { headers: { Authorization: `Bearer ${s.token}` } });
    return x.status === 200 ? x : null;
  }, 5000, 'artifact downloadable');
  const got = Buffer.from(await r.arrayBuffer());
  t.equal(createHash('sha256').update(got).digest('hex'), createHash('sha256').update(data).digest('hex'));
  t.match(r.headers.get('content-disposition'), /filename="crash report.bin"/);
  const mid = (await get(`${s.apiUrl}/api/instances?machine=m1`, s.token)).body.items[0].machine_id;
  t.equal((await get(`${s.apiUrl}/api/machines/${mid}/artifacts`, s.token)).body.items[0].sha256, createHash('sha256').update(data).digest('hex'));
});

t.test('refusals: no token, a wrong token, a missing file', async (t) => {
  const none = await fleet(['upload', ...target, file], { FLEET_TOKEN: '' });
  t.equal(none.code, 1);
  t.match(none.err, /no token/);
  const wrong = await fleet(['upload', ...target, '--token', 'fk_wrong', file]);
  t.equal(wrong.code, 1);
  t.match(wrong.err, /artifact-init: 403/);
  const missing = await fleet(['upload', ...target, '--token', s.token, join(dir, 'nope')]);
  t.equal(missing.code, 1);
  t.match(missing.err, /ENOENT|no such file/);
});
