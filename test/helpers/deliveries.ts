// How often JetStream handed each message to a worker, seen on the wire. A pull consumer delivers a
// message by publishing it to the worker's pull inbox (`_INBOX.…`) with a reply subject that names
// the stream, the consumer, the delivery count, the stream sequence and the consumer's delivery
// sequence (`$JS.ACK.<stream>.<consumer>.<count>.<stream seq>.<delivery seq>.…`). A test subscribed
// to `_INBOX.>` on the same server receives a copy of every delivery: what it held (the reports)
// and which delivery of its message it was. The consumer numbers its deliveries 1, 2, 3, … (a
// redelivery too), so `missed()` proves the record complete: no delivery sequence from the start
// of the watch to the consumer's last one is absent.
//
// Side effect, by nats-server's design: a pull request whose worker died stays "interested" while
// this subscription matches its inbox, so the server may still deliver to it until the request
// expires (the message is redelivered after ACK_WAIT_S). That adds deliveries, never removes one.
import type { JetStreamManager, NatsConnection, Subscription } from 'nats';
import { decodeBatch, toReport } from '../../lib/contract/messages.js';
import { JetStreamApiCodes, isNotFound, jsApiCode } from '../../lib/infra/jetstream-errors.js';

/**
 * Whether message `seq` has left the work-queue stream `stream`: acked (or deleted), so it is never
 * delivered again and its delivery counts are final.
 */
export async function gone(jsm: JetStreamManager, stream: string, seq: number): Promise<boolean> {
  return jsm.streams.getMessage(stream, { seq }).then(
    () => false,
    (e: unknown) => {
      if (jsApiCode(e) === JetStreamApiCodes.NoMessageFound) return true;
      throw e;
    },
  );
}

export interface Delivery {
  /** The stream the message is in (the main one or the heartbeat lane's). */
  stream: string;
  /** Stream sequence of the message. */
  seq: number;
  /** The consumer's delivery sequence (every delivery, a redelivery too, has the next one). */
  dseq: number;
  /** Which delivery of this message it is: 1 the first. */
  count: number;
  /** The report ids the message holds (none when it is not a report batch). */
  reports: string[];
  /** The machine of each report, in the same order. */
  machines: string[];
}

/** The parts of a JetStream delivery's reply subject (both formats: with and without domain and account hash). */
export function parseAckSubject(reply: string | undefined): { stream: string; consumer: string; count: number; seq: number; dseq: number } | null {
  if (!reply?.startsWith('$JS.ACK.')) return null;
  const t = reply.split('.');
  // v1: $JS.ACK.<stream>.<consumer>.<count>.<sseq>.<dseq>.<ts>.<pending>
  // v2: $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<count>.<sseq>.<dseq>.<ts>.<pending>.<token>
  const o = t.length === 9 ? 2 : t.length >= 11 ? 4 : -1;
  if (o < 0) return null;
  return { stream: t[o]!, consumer: t[o + 1]!, count: Number(t[o + 2]), seq: Number(t[o + 3]), dseq: Number(t[o + 4]) };
}

export interface DeliveryWatch {
  /** Every delivery seen, in the order seen. */
  readonly all: Delivery[];
  /** The deliveries of the message with stream sequence `seq` in `stream` (default: the first stream watched). */
  of(seq: number, stream?: string): Delivery[];
  /** Stream sequences of the messages in the first stream watched that hold a report for which `pick(id, machine)` is true. */
  seqsWith(pick: (id: string, machine: string) => boolean): number[];
  /** The messages, in any stream watched, that hold a report for which `pick(id, machine)` is true. */
  messagesWith(pick: (id: string, machine: string) => boolean): { stream: string; seq: number }[];
  /** Deliveries of each report id (over every message that holds it). */
  perReport(): Map<string, number>;
  /** Delivery sequences (`<stream> #<n>`) the consumers made since the watch began that were not seen (empty: the record is complete). */
  missed(): Promise<string[]>;
  stop(): Promise<void>;
}

/**
 * Starts recording the deliveries of `consumer` on `streams` (one stream, or several: the main one
 * and the heartbeat lane, each with its own consumer of that name); resolves once the server has
 * the subscription.
 */
export async function watchDeliveries(nc: NatsConnection, streams: string | string[], consumer = 'workers'): Promise<DeliveryWatch> {
  const names = typeof streams === 'string' ? [streams] : streams;
  const jsm = await nc.jetstreamManager();
  const all: Delivery[] = [];
  const sub: Subscription = nc.subscribe('_INBOX.>');
  const done = (async () => {
    for await (const m of sub) {
      const a = parseAckSubject(m.reply);
      if (!a || !names.includes(a.stream) || a.consumer !== consumer) continue;
      let reports: string[] = [];
      let machines: string[] = [];
      try {
        const r = decodeBatch(m.data).r.map((x) => (x !== null && typeof x === 'object' ? toReport(x) : undefined));
        reports = r.map((x) => String(x?.id));
        machines = r.map((x) => String(x?.machine));
      } catch {
        /* not a report batch (a rejection record, or bytes a test published): no reports */
      }
      all.push({ stream: a.stream, seq: a.seq, dseq: a.dseq, count: a.count, reports, machines });
    }
  })();
  await nc.flush();
  // Each consumer's last delivery (0: none, or not made yet: a worker makes it when it starts).
  const lastDelivery = (stream: string) =>
    jsm.consumers.info(stream, consumer).then(
      (i) => i.delivered.consumer_seq,
      (e: unknown) => {
        if (isNotFound(e)) return 0;
        throw e;
      },
    );
  // Deliveries up to here happened before the watch: not expected to be seen.
  const from = new Map<string, number>();
  for (const n of names) from.set(n, await lastDelivery(n));
  const holding = (pick: (id: string, machine: string) => boolean) => all.filter((d) => d.reports.some((id, i) => pick(id, d.machines[i]!)));
  return {
    all,
    of: (seq, stream = names[0]) => all.filter((d) => d.seq === seq && d.stream === stream),
    seqsWith: (pick) => [...new Set(holding(pick).filter((d) => d.stream === names[0]).map((d) => d.seq))],
    messagesWith(pick) {
      const out = new Map<string, { stream: string; seq: number }>();
      for (const d of holding(pick)) out.set(`${d.stream} ${d.seq}`, { stream: d.stream, seq: d.seq });
      return [...out.values()];
    },
    perReport() {
      const n = new Map<string, number>();
      for (const d of all) for (const id of d.reports) n.set(id, (n.get(id) ?? 0) + 1);
      return n;
    },
    async missed() {
      const out: string[] = [];
      for (const stream of names) {
        // The consumer's last delivery first, then a round trip: a copy sent before it has arrived.
        const last = await lastDelivery(stream);
        await nc.flush();
        const seen = new Set(all.filter((d) => d.stream === stream).map((d) => d.dseq));
        for (let q = from.get(stream)! + 1; q <= last; q++) if (!seen.has(q)) out.push(`${stream} #${q}`);
      }
      return out;
    },
    async stop() {
      sub.unsubscribe();
      await done;
    },
  };
}
