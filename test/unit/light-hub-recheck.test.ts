// The live streams' periodic authorisation check (api/light-stream.ts `LightHub`), over real HTTP
// connections to a server of this file's own: a stream opened while a check is running, by an
// auth that check did not ask about, stays open (it was authorised when it opened); a stream whose
// auth the check finds ended is closed with `event: ended`. Found by the stream quota test
// (test/stack/quotas.test.ts), which failed in two CI runs: the stream that took a freed slot was
// closed by the check that had started just before, and the customer's count fell below its
// open streams.
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { LightHub, streamAuthKey, type StreamAuth } from '../../api/light-stream.js';
import { createLogger } from '../../lib/infra/log.js';

const CUSTOMER = 'c1';
const hub = new LightHub(createLogger('test', 'silent'), 15, 100);
// GET /<token id>: a stream of CUSTOMER opened by that API token.
const server = createServer((req, res) => hub.open(CUSTOMER, res, { kind: 'token', tokenId: req.url!.slice(1) }));
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

interface Stream {
  text: () => string;
  close: () => void;
}
async function openStream(tokenId: string): Promise<Stream> {
  const ac = new AbortController();
  const r = await fetch(`${base}/${tokenId}`, { signal: ac.signal });
  let text = '';
  const reader = r.body!.getReader();
  void (async () => {
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      text += dec.decode(value, { stream: true });
    }
  })().catch(() => {});
  return { text: () => text, close: () => ac.abort() };
}

const until = async (f: () => boolean, what: string) => {
  for (let i = 0; i < 500 && !f(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!f()) throw new Error(`not seen: ${what}`);
};

// The check: records what it was asked, waits for `gate` while one is set, and finds every auth
// valid but those in `ended`.
const asked: string[][] = [];
const ended = new Set<string>();
let gate: Promise<void> | null = null;
hub.recheckWith(20, async (auths: StreamAuth[]) => {
  asked.push(auths.map(streamAuthKey));
  if (gate) await gate;
  return new Set(auths.map(streamAuthKey).filter((k) => !ended.has(k)));
});
t.teardown(() => {
  hub.close();
  server.closeAllConnections();
  server.close();
});

t.test('a stream opened while a check runs, by an auth it did not ask about, stays open', async (t) => {
  const a = await openStream('tok-a');
  let release!: () => void;
  gate = new Promise((r) => (release = r));
  const before = asked.length;
  await until(() => asked.length > before, 'a check under way');
  t.same(asked.at(-1), ['t:tok-a'], 'the check asks about the one stream open');

  const b = await openStream('tok-b');
  await until(() => hub.countOf(CUSTOMER) === 2, 'the second stream open');
  gate = null;
  release();
  // The next checks ask about both, and both hold.
  const now = asked.length;
  await until(() => asked.length >= now + 2, 'two more checks');
  t.equal(hub.countOf(CUSTOMER), 2, 'both streams counted');
  t.notMatch(b.text(), /event: ended/, 'the stream opened during the check was not ended');
  t.match(asked.at(-1)!.sort(), ['t:tok-a', 't:tok-b'], 'and later checks ask about it');
  a.close();
  b.close();
  await until(() => hub.countOf(CUSTOMER) === 0, 'both closed by their clients');
});

t.test('a stream whose token the check finds ended is closed with `event: ended`', async (t) => {
  const c = await openStream('tok-c');
  const d = await openStream('tok-d');
  ended.add('t:tok-c');
  await until(() => /event: ended/.test(c.text()), 'tok-c ended');
  t.match(c.text(), /session or token ended/);
  t.equal(hub.countOf(CUSTOMER), 1, 'its slot is free');
  t.notMatch(d.text(), /event: ended/, 'the other stays');
  d.close();
});
