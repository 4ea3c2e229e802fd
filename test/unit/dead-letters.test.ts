// The dead-letter format (lib/store/dead-letters.ts) without a server: the subject and headers the worker
// writes, the filters' input, and rendering any content (nested thousands deep, not UTF-8, huge)
// bounded and without throwing.
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { headers, type StoredMsg } from 'nats';
import { deadLetterOf, parse, parseSince, checkCustomer, customerToken, prettyJson, renderBytes, HEADERS, NO_CUSTOMER, LIMITS, DeadLetterInputError } from '../../lib/store/dead-letters.js';
import { encodeBatch, encodeReport, toWire, type Report } from '../../lib/contract/messages.js';

const report: Report = { id: randomUUID(), kind: 'status', customerId: randomUUID(), customer: 'acme', machine: 'm-1', software: 'agent', tokenId: randomUUID(), receivedAt: Date.UTC(2026, 10, 20, 8), body: { status: 'running' } };
const source = { stream: 'INGEST', seq: 42, subject: 'ingest.reports', deliveries: 1 };

t.test("a report's dead letter: on its customer's subject, every header filtering needs", async (t) => {
  const now = Date.UTC(2026, 10, 20, 9);
  const dl = deadLetterOf({ base: 'ingest-dlq.reports', failure: { kind: 'data', reason: 'Postgres refused a value (23503\r\nforeign_key_violation)' }, failureClass: 'data', source, report, now });
  t.equal(dl.subject, 'ingest-dlq.reports.acme');
  const h = dl.headers;
  t.equal(h.get(HEADERS.customer), 'acme');
  t.equal(h.get(HEADERS.customerId), report.customerId);
  t.equal(h.get(HEADERS.kind), 'status');
  t.equal(h.get(HEADERS.machine), 'm-1');
  t.equal(h.get(HEADERS.software), 'agent');
  t.equal(h.get(HEADERS.reportId), report.id);
  t.equal(h.get(HEADERS.failure), 'data');
  t.equal(h.get(HEADERS.errorKind), 'data');
  t.equal(h.get(HEADERS.error), 'Postgres refused a value (23503 foreign_key_violation)', 'one line');
  t.equal(h.get(HEADERS.deliveries), '1');
  t.equal(h.get(HEADERS.subject), 'ingest.reports');
  t.equal(h.get(HEADERS.streamSeq), '42');
  t.equal(h.get(HEADERS.at), '2026-11-20T09:00:00.000Z');
  t.equal(dl.msgID, `dlq-INGEST-42-${report.id}`, 'names the ingest message: a replayed report dead-lettered again is a new dead letter');
  const again = deadLetterOf({ base: 'ingest-dlq.reports', failure: { kind: 'data', reason: 'x' }, failureClass: 'data', source: { ...source, seq: 99 }, report });
  t.not(again.msgID, dl.msgID);
});

t.test('no customer known, or not a slug: the _none subject', async (t) => {
  const undecodable = deadLetterOf({ base: 'b', failure: { kind: 'data', reason: 'queue message cannot be decoded' }, failureClass: 'decode', source });
  t.equal(undecodable.subject, `b.${NO_CUSTOMER}`);
  t.notOk(undecodable.headers.has(HEADERS.customer));
  t.equal(undecodable.msgID, 'dlq-INGEST-42');
  // Reports of one message that are not objects have no id: their places tell their dead letters apart.
  const notObjects = [1, 4].map((index) => deadLetterOf({ base: 'b', failure: { kind: 'data', reason: 'x' }, failureClass: 'data', source: { ...source, index } }).msgID);
  t.same(notObjects, ['dlq-INGEST-42-#1', 'dlq-INGEST-42-#4'], 'two reports without an id in one message: two dead letters');
  t.equal(deadLetterOf({ base: 'b', failure: { kind: 'data', reason: 'x' }, failureClass: 'data', source: { ...source, index: 3 }, report }).msgID, `dlq-INGEST-42-${report.id}`, 'a report with an id is named by it, as before');
  const odd = deadLetterOf({ base: 'b', failure: { kind: 'unknown', reason: 'x' }, failureClass: 'unknown', source, report: { ...report, customer: 'Not.A slug>' } });
  t.equal(odd.subject, `b.${NO_CUSTOMER}`, 'a subject token cannot be made of it');
  t.equal(customerToken('acme-2'), 'acme-2');
  t.equal(customerToken(''), NO_CUSTOMER);
  t.equal(customerToken(null), NO_CUSTOMER);
  const rejection = deadLetterOf({
    base: 'b',
    failure: { kind: 'data', reason: 'x' },
    failureClass: 'data',
    source,
    rejection: { id: randomUUID(), at: 1, customer_id: '', customer: 'guessed', token_id: '', method: 'POST', path: '/x', status: 403, detail: 'd', body_size: 0, remote: '', dropped: 0 },
  });
  t.equal(rejection.subject, `b.${NO_CUSTOMER}`, 'a rejection without a known customer is nobody’s');
});

t.test('since: ISO times and durations; anything else is refused with a clear message', async (t) => {
  const now = Date.UTC(2026, 10, 20, 12);
  t.equal(parseSince('2h', now), now - 2 * 3_600_000);
  t.equal(parseSince('90s', now), now - 90_000);
  t.equal(parseSince('30m', now), now - 1_800_000);
  t.equal(parseSince('7d', now), now - 7 * 86_400_000);
  t.equal(parseSince('1w', now), now - 7 * 86_400_000);
  t.equal(parseSince('1.5h', now), now - 5_400_000);
  t.equal(parseSince('2026-11-20T08:00:00Z', now), Date.UTC(2026, 10, 20, 8));
  for (const bad of ['yesterday', '2', '-2h', '2x', '', '12:00'])
    t.throws(() => parseSince(bad, now), DeadLetterInputError, `refused: ${JSON.stringify(bad)}`);
  t.equal(checkCustomer('acme'), 'acme');
  t.equal(checkCustomer(NO_CUSTOMER), NO_CUSTOMER);
  t.throws(() => checkCustomer('ACME'), DeadLetterInputError);
});

t.test('prettyJson: pretty, bounded in size and depth, never throws', async (t) => {
  t.equal(prettyJson({ a: [1, 'x'], b: {} }).text, '{\n  "a": [\n    1,\n    "x"\n  ],\n  "b": {}\n}');
  // Nested 100,000 deep: JSON.parse copes, JSON.stringify would overflow the stack.
  const deep = JSON.parse('['.repeat(100_000) + ']'.repeat(100_000));
  t.throws(() => JSON.stringify(deep, null, 2), RangeError, 'the naive way fails');
  const d = prettyJson(deep);
  t.ok(d.truncated);
  t.match(d.text, /\[… 1 items\]/, 'summarised below the depth limit');
  t.ok(d.text.split('\n').length <= 2 * LIMITS.bodyDepth + 2, 'no more lines than the depth allows');
  const big = prettyJson({ s: 'x'.repeat(10 * 1024 * 1024), more: Array.from({ length: 100_000 }, (_, i) => i) });
  t.ok(big.truncated);
  t.ok(big.text.length <= LIMITS.bodyChars + 20, `bounded: ${big.text.length} characters`);
  t.match(big.text, /… \(truncated\)$/);
});

t.test('renderBytes: JSON, text, or a hex dump of bytes that are not UTF-8', async (t) => {
  const json = renderBytes(Buffer.from('{"a":1}'));
  t.same(json, { format: 'json', bytes: 7, text: '{\n  "a": 1\n}', truncated: false });
  const text = renderBytes(Buffer.from('this is not a batch'));
  t.same(text, { format: 'text', bytes: 19, text: 'this is not a batch', truncated: false });
  const bin = renderBytes(Buffer.from([0xff, 0xfe, 0x00, 0x41, 0xc3]));
  t.equal(bin.format, 'hex');
  t.equal(bin.text, `00000000  ${'ff fe 00 41 c3'.padEnd(47)}  |...A.|`);
  const large = renderBytes(Buffer.alloc(1024 * 1024, 0xff));
  t.equal(large.format, 'hex');
  t.ok(large.truncated && large.text.length <= LIMITS.bodyChars + 20, 'a megabyte of bytes, bounded');
  const deep = renderBytes(Buffer.from('{"a":'.repeat(50_000) + '1' + '}'.repeat(50_000)));
  t.equal(deep.format, 'json');
  t.ok(deep.truncated);
});

/** A stored message as JetStream hands it out (the shape of nats.js's StoredMsg). */
function stored(seq: number, subject: string, data: Uint8Array, h = headers()): StoredMsg {
  const time = new Date(Date.UTC(2026, 10, 20, 9));
  return { seq, subject, data, header: h, time, timestamp: time.toISOString(), json: () => JSON.parse(Buffer.from(data).toString()), string: () => Buffer.from(data).toString() };
}

t.test('reading a stored dead letter: from its headers, or (older ones) from its content', async (t) => {
  const dl = deadLetterOf({ base: 'b', failure: { kind: 'data', reason: 'why' }, failureClass: 'data', source, report });
  const data = encodeBatch([Buffer.from(JSON.stringify(toWire(report)))]);
  const p = parse(stored(7, dl.subject, data, dl.headers));
  t.match(p.summary, { seq: 7, customer: 'acme', customer_id: report.customerId, kind: 'status', machine: 'm-1', software: 'agent', reports: 1, report_ids: [report.id], failure: 'data', error: 'why', deliveries: 1, stream_seq: 42, content: 'reports', size: data.length });
  // Before the format had these headers: a batch of reports, headers with the reason only.
  const old = headers();
  old.set('Fleet-Error', 'old reason');
  const r2 = { ...report, id: randomUUID(), machine: 'm-2' };
  const o = parse(stored(8, 'b', encodeBatch([encodeReport({ ...report }, Buffer.from('{}')), encodeReport({ ...r2 }, Buffer.from('{}'))]), old));
  t.match(o.summary, { customer: 'acme', kind: 'status', machine: null, reports: 2, report_ids: [report.id, r2.id], error: 'old reason', failure: null, content: 'reports' });
  const u = parse(stored(9, `b.${NO_CUSTOMER}`, Buffer.from([0xff, 0x00])));
  t.match(u.summary, { customer: null, reports: 0, report_ids: [], content: 'undecodable' });
  const rec = { id: randomUUID(), at: 1, customer_id: report.customerId, customer: 'acme', token_id: '', method: 'POST', path: '/api/ingest/acme/m/s/heartbeat', status: 429, detail: 'd', body_size: 0, remote: '', dropped: 0 };
  const rej = parse(stored(11, 'b.acme', Buffer.from(JSON.stringify(rec))));
  t.match(rej.summary, { content: 'rejection', customer: 'acme', customer_id: report.customerId, report_ids: [rec.id], reports: 0 }, 'a rejection-log record: replayable to its own subject');
  const notReports = parse(stored(10, 'b', Buffer.from('{"v":1,"r":[1,2]}')));
  t.equal(notReports.summary.content, 'undecodable', 'a batch whose entries are not reports is not replayable');
});
