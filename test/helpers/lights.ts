// Helpers for the traffic-light tests: the stored colour, the recorded events, a Server-Sent
// Events reader, and direct publishing of report batches (many instances at once).
import { randomUUID } from 'node:crypto';
import type { TestStack } from './stack.js';
import { chRows } from './stack.js';
import { encodeBatch, encodeReport, subjects } from '../../lib/contract/messages.js';
import { withTx, type Pool } from '../../lib/infra/postgres.js';
import { recordLightChanges, type RecordedChanges } from '../../lib/store/light-events.js';
import { lightEventId, type LightEvent } from '../../lib/domain/traffic-light.js';

export interface EventRow {
  instance_id: string;
  machine: string;
  software: string;
  seq: number;
  from_light: string;
  to_light: string;
  reason: string;
  cause: string;
  at_ms: number;
  recorded_ms: number;
}

/** Recorded changes (ClickHouse, FINAL), oldest first per instance. */
export async function events(s: TestStack, where = '1'): Promise<EventRow[]> {
  const rows = await chRows<Record<string, string | number>>(
    s.ch,
    `SELECT instance_id, machine, software, seq, from_light, to_light, reason, cause, at_ms, recorded_ms
       FROM light_events FINAL WHERE ${where} ORDER BY machine, software, seq`,
  );
  return rows.map((r) => ({
    instance_id: String(r.instance_id),
    machine: String(r.machine),
    software: String(r.software),
    seq: Number(r.seq),
    from_light: String(r.from_light),
    to_light: String(r.to_light),
    reason: String(r.reason),
    cause: String(r.cause),
    at_ms: Number(r.at_ms),
    recorded_ms: Number(r.recorded_ms),
  }));
}

export interface StoredLight {
  id: string;
  light: string;
  light_seq: number;
  last_heartbeat_ms: number | null;
}

export async function stored(s: TestStack, machine: string, software = 'agent'): Promise<StoredLight | null> {
  const r = await s.pool.query(
    `SELECT i.id, il.light, il.light_seq, (extract(epoch FROM i.last_heartbeat_at) * 1000)::float8 AS hb
       FROM instances i JOIN instance_lights il ON il.instance_id = i.id JOIN machines m ON m.id = i.machine_id WHERE m.slug = $1 AND i.software = $2`,
    [machine, software],
  );
  const row = r.rows[0];
  return row ? { id: row.id, light: row.light, light_seq: Number(row.light_seq), last_heartbeat_ms: row.hb === null ? null : Math.round(row.hb) } : null;
}

export interface SseEvent {
  id?: string;
  event?: string;
  data: string;
  receivedAt: number;
}

/** A Server-Sent Events client on fetch: resolves once the stream is open (headers received). */
export async function openStream(url: string, token: string | null) {
  const ac = new AbortController();
  const res = await fetch(url, { headers: token ? { Authorization: `Bearer ${token}` } : {}, signal: ac.signal });
  const received: SseEvent[] = [];
  let raw = '';
  let ended = false;
  let done: Promise<void> = Promise.resolve();
  if (res.ok && res.body) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    done = (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) {
            ended = true;
            return;
          }
          const text = dec.decode(value, { stream: true });
          raw += text;
          buf += text;
          let i: number;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const ev: SseEvent = { data: '', receivedAt: Date.now() };
            let hasData = false;
            for (const line of block.split('\n')) {
              if (line.startsWith(':')) continue;
              const [k, ...rest] = line.split(':');
              const v = rest.join(':').replace(/^ /, '');
              if (k === 'id') ev.id = v;
              else if (k === 'event') ev.event = v;
              else if (k === 'data') {
                ev.data += (hasData ? '\n' : '') + v;
                hasData = true;
              }
            }
            if (hasData) received.push(ev);
          }
        }
      } catch {
        /* aborted */
      }
    })();
  }
  return {
    status: res.status,
    headers: res.headers,
    received,
    get raw() {
      return raw;
    },
    /** The server ended the stream (not our close()). */
    get ended() {
      return ended;
    },
    /** Parsed `light` events. */
    lights(): { id: string; instance_id: string; machine: string; from: string; to: string; seq: number; cause: string }[] {
      return received.filter((e) => e.event === 'light').map((e) => JSON.parse(e.data));
    },
    async close() {
      ac.abort();
      await done;
    },
    body: (res.ok ? null : await res.json().catch(() => null)) as { detail?: string } | null,
  };
}

/**
 * Publishes heartbeats of `machines` (software `agent`) straight to the stream, as a gateway would,
 * all with receive time `at`: many instances that heartbeat once, together.
 */
export async function publishHeartbeats(s: TestStack, machines: string[], at: number, perMessage = 500): Promise<void> {
  const js = s.nc.jetstream();
  const subject = subjects(s.env.SUBJECT_PREFIX!).reports;
  const tokenId = randomUUID();
  for (let i = 0; i < machines.length; i += perMessage) {
    const reports = machines.slice(i, i + perMessage).map((m) =>
      encodeReport({ id: randomUUID(), kind: 'heartbeat', customerId: s.customer.id, customer: s.customer.slug, machine: m, software: 'agent', tokenId, receivedAt: at }, null),
    );
    await js.publish(subject, encodeBatch(reports), { msgID: randomUUID() });
  }
}

/**
 * Judges the colour of every instance (or those of `customerId`) as a worker would, and stores it:
 * for tests that write `instances` rows with SQL (many at once) and then read them through the
 * api, which shows the stored colour. `horizonMs`: the time silence is judged at (now).
 */
export async function judgeAll(pool: Pool, customerId?: string, horizonMs = Date.now(), warningWindowS = 900): Promise<number> {
  const ids = (await pool.query<{ id: string }>(`SELECT id FROM instances WHERE retired_at IS NULL AND ($1::uuid IS NULL OR customer_id = $1)`, [customerId ?? null])).rows.map((r) => r.id);
  let changes = 0;
  for (let i = 0; i < ids.length; i += 5000)
    changes += (await withTx(pool, (c) => recordLightChanges(c, ids.slice(i, i + 5000), 'sweep', warningWindowS, horizonMs))).events.length;
  return changes;
}

/**
 * `events` into the outbox as one recording leaves them (one row per customer: lib/store/light-events.ts),
 * for tests of delivery and of what the outbox holds; returns them with their rows' keys, as the
 * recording statement does.
 */
export async function writeOutbox(pool: Pool, events: LightEvent[], recordedAt?: string): Promise<RecordedChanges> {
  const recording = randomUUID();
  const byCustomer = new Map<string, LightEvent[]>();
  for (const e of events) byCustomer.set(e.customer_id, [...(byCustomer.get(e.customer_id) ?? []), e]);
  for (const [customerId, list] of byCustomer) {
    const col = <K extends keyof LightEvent>(k: K) => list.map((e) => e[k]);
    await pool.query(
      `INSERT INTO light_outbox (recording, customer_id, customer, cause, recorded_at, instance_ids, seqs, machine_ids, machines, softwares, from_lights, to_lights, reasons, ats)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
      [recording, customerId, list[0]!.customer, list[0]!.cause, recordedAt ?? list[0]!.recorded_at, col('instance_id'), col('seq'), col('machine_id'), col('machine'), col('software'), col('from'), col('to'), col('reason'), col('at')],
    );
  }
  return { events, outbox: [...byCustomer.keys()].map((customer_id) => ({ recording, customer_id })) };
}

/**
 * `n` changes to red of new instances of `customer` (machines `<name>-0` …), at `at`, into the
 * outbox as one recording leaves them (writeOutbox).
 */
export async function outboxBatch(pool: Pool, customer: { id: string; slug: string }, name: string, n: number, at = new Date().toISOString(), seq = 2): Promise<RecordedChanges> {
  const events: LightEvent[] = Array.from({ length: n }, (_, i) => {
    const instanceId = randomUUID();
    return {
      id: lightEventId(instanceId, seq),
      seq,
      customer_id: customer.id,
      customer: customer.slug,
      instance_id: instanceId,
      machine_id: randomUUID(),
      machine: `${name}-${i}`,
      software: 'agent',
      from: 'green',
      to: 'red',
      reason: 'silent',
      cause: 'expiry',
      at,
      recorded_at: at,
    };
  });
  return writeOutbox(pool, events);
}
