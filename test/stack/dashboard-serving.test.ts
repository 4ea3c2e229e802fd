// The api serves the dashboard itself: every page path (deep links included) answers the same HTML
// shell with a strict Content-Security-Policy and no data in it; the files it names come from
// /assets with long-lived caching (gzip on request); nothing is loaded from another host; unknown
// files and paths stay 404 with {"detail"}. (What the pages do is tested in a real browser:
// dashboard-browser.test.ts.)
import t from 'tap';
import { gunzipSync } from 'node:zlib';
import { randomUUID } from 'node:crypto';
import { testStack } from '../helpers/stack.js';

const s = await testStack(t, 'dashserve', { gateway: false, worker: false });
const fetchRaw = (path: string, headers: Record<string, string> = {}) => fetch(`${s.apiUrl}${path}`, { headers });

t.test('every page path answers the same HTML shell, with a strict CSP, uncached', async (t) => {
  const first = await fetchRaw('/');
  t.equal(first.status, 200);
  t.match(first.headers.get('content-type'), /^text\/html/);
  const csp = first.headers.get('content-security-policy') ?? '';
  t.match(csp, /default-src 'self'/);
  t.match(csp, /script-src 'self'(;|$)/, 'no inline or foreign scripts');
  t.match(csp, /style-src 'self'(;|$)/, 'no inline or foreign styles');
  t.match(csp, /frame-ancestors 'none'/);
  t.equal(first.headers.get('cache-control'), 'no-cache');
  t.equal(first.headers.get('x-content-type-options'), 'nosniff');
  const html = await first.text();
  t.match(html, /<div id="app"><\/div>/);
  t.match(html, /<script type="module" crossorigin src="\/assets\/[^"]+\.js">/);
  t.notMatch(html, /https?:\/\//, 'nothing from another host (no CDN, no web fonts)');
  t.notMatch(html, /<script>/, 'no inline script');

  for (const path of ['/login', '/settings', `/instances/${randomUUID()}`, '/instances/not-an-id', '/settings?x=1#tokens']) {
    const r = await fetchRaw(path);
    t.equal(r.status, 200, `${path}: 200`);
    t.equal(await r.text(), html, `${path}: the same shell`);
  }
  const head = await fetch(`${s.apiUrl}/instances/${randomUUID()}`, { method: 'HEAD' });
  t.equal(head.status, 200, 'HEAD too');
});

t.test('the shell carries no data: the same for anyone, logged in or not', async (t) => {
  const u = await s.newUser('owner');
  const anon = await (await fetchRaw('/')).text();
  const withSession = await (await fetchRaw('/', { Cookie: `fleet_session=${u.jwt}` })).text();
  t.equal(withSession, anon);
  t.notMatch(anon, new RegExp(s.customer.slug), 'no customer in it');
  t.notMatch(anon, /fk_/, 'no token in it');
});

t.test('assets: the files the shell names, immutable, gzip when asked, correct types', async (t) => {
  const html = await (await fetchRaw('/')).text();
  const files = [...html.matchAll(/(?:src|href)="\/assets\/([^"]+)"/g)].map((m) => m[1]!);
  t.ok(files.some((f) => f.endsWith('.js')) && files.some((f) => f.endsWith('.css')), `a script and a stylesheet: ${files.join(', ')}`);
  for (const f of files) {
    const plain = await fetchRaw(`/assets/${f}`, { 'Accept-Encoding': 'identity' });
    t.equal(plain.status, 200, f);
    t.match(plain.headers.get('cache-control'), /immutable/, `${f}: cached for good (the name carries its hash)`);
    const type = plain.headers.get('content-type') ?? '';
    if (f.endsWith('.js')) t.match(type, /javascript/);
    if (f.endsWith('.css')) t.match(type, /text\/css/);
    if (f.endsWith('.svg')) t.match(type, /image\/svg\+xml/);
    const body = Buffer.from(await plain.arrayBuffer());
    t.ok(body.length > 0, `${f}: not empty`);
    if (f.endsWith('.css')) t.notMatch(body.toString(), /url\(\s*['"]?https?:/, 'the stylesheet loads nothing from another host');
    if (f.endsWith('.js')) t.notMatch(body.toString(), /fonts\.googleapis|cdn\.jsdelivr|unpkg\.com|cdnjs/, 'the script names no CDN');
    if (body.length > 1024) {
      // undici decompresses transparently unless asked not to: read the raw bytes over node:http.
      const gz = await rawGet(`${s.apiUrl}/assets/${f}`, { 'Accept-Encoding': 'gzip' });
      t.equal(gz.headers['content-encoding'], 'gzip', `${f}: gzip`);
      t.equal(gz.headers.vary, 'Accept-Encoding');
      t.ok(gunzipSync(gz.body).equals(body), `${f}: the same bytes once unzipped`);
      t.ok(gz.body.length < body.length, `${f}: smaller (${gz.body.length} < ${body.length})`);
    }
  }
});

t.test('unknown files and paths: 404 with a detail; no way out of the asset folder', async (t) => {
  const r = await fetchRaw('/assets/nope-123.js');
  t.equal(r.status, 404);
  t.match(((await r.json()) as { detail: string }).detail, /no such file/);
  for (const p of ['/assets/..%2F..%2Fpackage.json', '/assets/.build-stamp', '/assets/%2e%2e%2findex.html']) {
    const x = await fetchRaw(p);
    t.not(x.status, 200, `${p} -> ${x.status}`);
  }
  for (const p of ['/fleet', '/instances', '/instances/x/y', '/settings/tokens']) {
    const x = await fetchRaw(p);
    t.equal(x.status, 404, p);
    t.match(((await x.json()) as { detail: string }).detail, /^no such endpoint/, `${p}: the API's 404`);
  }
  t.equal((await fetch(`${s.apiUrl}/`, { method: 'POST' })).status, 405, 'POST / is 405');
});

async function rawGet(url: string, headers: Record<string, string>): Promise<{ headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  const http = await import('node:http');
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
      })
      .on('error', reject);
  });
}
