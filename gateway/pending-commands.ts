// Every open agent command (queued or delivered), in the memory of every gateway replica, keyed by
// instance (customer id + machine slug + software slug: what the gateway knows from the token and
// the path, so no id lookup is needed). A heartbeat or status report asks `offer()`: Map lookups,
// no database or network round trip, whether or not something is pending. What is pending goes out
// in the answer, pre-serialised, and its ids go into the report so that the worker records the
// delivery (the gateway never writes to Postgres).
//
// Kept current by
//   - hints on core NATS `${SUBJECT_PREFIX}.control.commands` naming the instances whose open
//     commands changed (published after the commit by the api on queue/cancel and by the workers on
//     delivery/ack/expiry): those instances are re-read, in one query per burst of hints;
//   - a full re-read every COMMAND_RESYNC_MS and after every NATS reconnect, the safety net for a
//     hint that was lost (core NATS is at-most-once).
// Re-reads run one at a time, and a full re-read leaves alone the instances hinted while it ran
// (they are re-read right after), so an older answer never overwrites a newer one.
//
// Acks: the command must belong to the acking instance (else 404). Open commands and recently
// finished ones are checked in memory; an id unknown to the memory costs one read, within a global
// budget, so random ids cannot flood Postgres. The reads: lib/store/commands.ts.
import { Events, type NatsConnection, type Subscription } from 'nats';
import type { Pool } from '../lib/infra/postgres.js';
import type { Metrics } from '../lib/infra/metrics.js';
import { HttpError, notFound } from '../lib/contract/errors.js';
import { listenHints } from '../lib/infra/hints.js';
import { commandInstance, decodeHint, instanceKeyOf, listOpenCommands, listOpenCommandsOf, type OpenCommandRow } from '../lib/store/commands.js';
import { RateLimiter } from './rate-limiter.js';

interface Cmd {
  id: string;
  key: string;
  /** ms since the epoch: a queued command is offered until it expires, a delivered one until its ack deadline. */
  deadline: number;
  /** `{"id","module","command","args"}`, serialised once. */
  json: string;
}

export interface Offer {
  ids: string[];
  /** The whole answer: `{"ok":true,"commands":[…]}`. */
  body: string;
}

const RECENT_MAX = 100_000;

export interface PendingCommandsOptions {
  pool: Pool;
  nc: NatsConnection;
  subject: string;
  resyncMs: number;
  metrics?: Metrics<'gateway'>;
  onError?(e: unknown): void;
}

type Index = Map<string, Map<string, Map<string, Cmd[]>>>;

export class PendingCommands {
  private byKey = new Map<string, Cmd[]>();
  /** The same lists as byKey, as customer id -> machine -> software: the hot path looks up without building a key string. */
  private index: Index = new Map();
  private byId = new Map<string, Cmd>();
  /** Commands that left the open set lately (acked, expired, …) -> their instance key: repeated acks stay cheap. */
  private recent = new Map<string, string>();
  private dirty = new Set<string>();
  private fullDue = false;
  private running: Promise<void> | null = null;
  private retry: NodeJS.Timeout | null = null;
  private timer: NodeJS.Timeout | null = null;
  private sub: Subscription | null = null;
  private lookupBudget = new RateLimiter(50, 100);
  private readonly offered;
  private readonly openGauge;
  /** Time of the last successful full re-read (ms). */
  lastFullSync = 0;

  constructor(private readonly o: PendingCommandsOptions) {
    this.offered = o.metrics?.counter('fleet_gateway_commands_offered_total');
    this.openGauge = o.metrics?.gauge('fleet_gateway_commands_open');
  }

  /** Loads every open command, then follows hints and re-reads periodically. */
  async start(): Promise<void> {
    // Subscribe first: a hint that arrives during the first load is applied after it.
    this.sub = listenHints(this.o.nc, this.o.subject, decodeHint, (refs) => {
      for (const r of refs) this.dirty.add(instanceKeyOf(r.customerId, r.machine, r.software));
      void this.kick();
    });
    this.fullDue = true;
    await this.kick();
    if (this.lastFullSync === 0) {
      this.stop();
      throw new Error('could not load the open agent commands');
    }
    this.timer = setInterval(() => this.resyncSoon(), this.o.resyncMs);
    this.timer.unref();
    void (async () => {
      for await (const s of this.o.nc.status()) if (s.type === Events.Reconnect) this.resyncSoon();
    })().catch(() => {});
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.retry) clearTimeout(this.retry);
    this.sub?.unsubscribe();
  }

  resyncSoon(): void {
    this.fullDue = true;
    void this.kick();
  }

  get size(): number {
    return this.byId.size;
  }

  /** The hot path: what to hand to this instance now, or null (the usual case). */
  offer(customerId: string, machine: string, software: string): Offer | null {
    if (this.byKey.size === 0) return null;
    const list = this.index.get(customerId)?.get(machine)?.get(software);
    if (list === undefined) return null;
    const now = Date.now();
    let body = '';
    const ids: string[] = [];
    for (const c of list) {
      if (c.deadline <= now) continue; // overdue: the sweep is about to end it
      body += (ids.length ? ',' : '') + c.json;
      ids.push(c.id);
    }
    if (ids.length === 0) return null;
    this.offered?.inc(ids.length);
    return { ids, body: `{"ok":true,"commands":[${body}]}` };
  }

  /** null when the command belongs to this instance; 404 when not; 503 when it cannot be checked now. */
  checkAck(customerId: string, machine: string, software: string, commandId: string): HttpError | null | Promise<HttpError | null> {
    const key = instanceKeyOf(customerId, machine, software);
    const owner = this.byId.get(commandId)?.key ?? this.recent.get(commandId);
    if (owner !== undefined) return owner === key ? null : notFound('no such command for this instance');
    if (!this.lookupBudget.take('all')) return new HttpError(503, 'too many acks for unknown commands; retry', { retryAfterS: 1 });
    return commandInstance(this.o.pool, commandId).then(
      (ref) => {
        if (!ref) return notFound('no such command for this instance');
        const k = instanceKeyOf(ref.customerId, ref.machine, ref.software);
        this.remember(commandId, k);
        return k === key ? null : notFound('no such command for this instance');
      },
      (e) => {
        this.o.onError?.(e);
        return new HttpError(503, 'command check unavailable; retry', { retryAfterS: 2 });
      },
    );
  }

  // ---- keeping the copy current ----

  private kick(): Promise<void> {
    if (this.running) return this.running;
    this.running = this.pump().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async pump(): Promise<void> {
    while (this.fullDue || this.dirty.size > 0) {
      let keys: string[] | null = null;
      try {
        if (this.fullDue) {
          // Everything hinted so far is covered by this read; what is hinted while it runs is not.
          this.fullDue = false;
          this.dirty.clear();
          this.applyFull(await listOpenCommands(this.o.pool));
          this.lastFullSync = Date.now();
        } else {
          keys = [...this.dirty];
          this.dirty.clear();
          const refs = keys.map((k) => {
            const [customerId, machine, software] = k.split('|') as [string, string, string];
            return { customerId, machine, software };
          });
          this.applyKeys(keys, await listOpenCommandsOf(this.o.pool, refs));
        }
        this.openGauge?.set(this.byId.size);
      } catch (e) {
        this.o.onError?.(e);
        // Try again shortly; until then the copy stays as it was.
        if (keys) for (const k of keys) this.dirty.add(k);
        else this.fullDue = true;
        if (!this.retry) {
          this.retry = setTimeout(() => {
            this.retry = null;
            void this.kick();
          }, 1000);
          this.retry.unref();
        }
        return;
      }
    }
  }

  private toCmd(r: OpenCommandRow): Cmd {
    return {
      id: r.id,
      key: instanceKeyOf(r.customer_id, r.machine, r.software),
      deadline: r.deadline ? r.deadline.getTime() : Number.MAX_SAFE_INTEGER,
      json: JSON.stringify({ id: r.id, module: r.module, command: r.command, args: r.args ?? {} }),
    };
  }

  private applyFull(rows: OpenCommandRow[]): void {
    const byKey = new Map<string, Cmd[]>();
    const byId = new Map<string, Cmd>();
    for (const r of rows) {
      const c = this.toCmd(r);
      if (this.dirty.has(c.key)) continue; // hinted meanwhile: keep the old entries, re-read next
      byId.set(c.id, c);
      const l = byKey.get(c.key);
      if (l) l.push(c);
      else byKey.set(c.key, [c]);
    }
    for (const k of this.dirty) {
      const old = this.byKey.get(k);
      if (!old) continue;
      byKey.set(k, old);
      for (const c of old) byId.set(c.id, c);
    }
    for (const [id, c] of this.byId) if (!byId.has(id)) this.remember(id, c.key);
    const index: Index = new Map();
    for (const [k, l] of byKey) indexSet(index, k, l);
    this.byKey = byKey;
    this.byId = byId;
    this.index = index;
  }

  private applyKeys(keys: string[], rows: OpenCommandRow[]): void {
    const fresh = new Map<string, Cmd[]>();
    for (const r of rows) {
      const c = this.toCmd(r);
      const l = fresh.get(c.key);
      if (l) l.push(c);
      else fresh.set(c.key, [c]);
    }
    for (const k of keys) {
      const now = fresh.get(k);
      const ids = new Set(now?.map((c) => c.id));
      for (const c of this.byKey.get(k) ?? []) {
        if (!ids.has(c.id)) {
          this.byId.delete(c.id);
          this.remember(c.id, c.key);
        }
      }
      if (now) {
        this.byKey.set(k, now);
        for (const c of now) this.byId.set(c.id, c);
      } else this.byKey.delete(k);
      indexSet(this.index, k, now);
    }
  }

  private remember(id: string, key: string): void {
    this.recent.delete(id);
    this.recent.set(id, key);
    if (this.recent.size > RECENT_MAX) this.recent.delete(this.recent.keys().next().value!);
  }
}

/** Sets (or, with no list, removes) one instance's commands in the nested index. */
function indexSet(index: Index, key: string, list: Cmd[] | undefined): void {
  const [customerId, machine, software] = key.split('|') as [string, string, string];
  let machines = index.get(customerId);
  if (list === undefined) {
    const softwares = machines?.get(machine);
    if (!softwares) return;
    softwares.delete(software);
    if (softwares.size === 0) machines!.delete(machine);
    if (machines!.size === 0) index.delete(customerId);
    return;
  }
  if (!machines) index.set(customerId, (machines = new Map()));
  let softwares = machines.get(machine);
  if (!softwares) machines.set(machine, (softwares = new Map()));
  softwares.set(software, list);
}

