// The fast path to red: a heartbeat key (`${REDIS_PREFIX}hb:<instance id>`, expiring at the last
// heartbeat's receive time + HEARTBEAT_TIMEOUT_S) expired, so Redis publishes
// `__keyevent@<db>__:expired` with the key name. Every worker listens; each recomputes the colour
// of the instances whose keys expired, and the conditional UPDATE in recordTransitions lets
// exactly one of them record each change. Expiry events are fire-and-forget (none while no
// listener is connected, and Redis expires lazily and by sampling, so they may come late): the
// sweep (workers/light-sweep.ts) repairs whatever is missed here.
import { Redis } from '../lib/infra/redis.js';
import { asCluster, createRedis, redisKeys } from '../lib/infra/redis.js';
import type { Pool } from '../lib/infra/postgres.js';
import type { Logger } from '../lib/infra/log.js';
import { NO_WAITING, type LightEvent, type WaitingHeartbeats } from '../lib/domain/traffic-light.js';
import { notRed, silentButLit } from '../lib/store/instances.js';
import { recordFreeTransitionsTx, type Horizon, type LightEventSink, type LightParams } from './traffic-light.js';
import { afterJudgement, type SilenceTimes } from './light-sweep.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Expiry events that arrive together are handled together, after this short wait. */
const GATHER_MS = 10;
/**
 * An expired instance whose deadline the horizon has not passed yet (reports received before it
 * may still wait in the queue) is deferred: every DEFER_RETRY_MS the ones the horizon has passed
 * are looked at again, for up to DEFER_MAX_MS; after that the sweep, which judges by the same
 * horizon, records them.
 */
const DEFER_RETRY_MS = 200;
const DEFER_MAX_MS = 120_000;
/**
 * Batches of changes that may wait for delivery (ClickHouse, NATS, the outbox) before the next
 * batch is recorded: the overlap needs one; more absorb a slow insert without a pause.
 */
const MAX_QUEUED_BATCHES = 4;

/**
 * The `notify-keyspace-events` flags with expired-key events added: `E` (keyevent channel) and `x`
 * (expired), unless already covered (`A` includes `x`). Returns null when nothing is missing.
 */
export function withExpiredEvents(flags: string): string | null {
  const hasE = flags.includes('E');
  const hasX = flags.includes('x') || flags.includes('A');
  if (hasE && hasX) return null;
  return flags + (hasE ? '' : 'E') + (hasX ? '' : 'x');
}

/**
 * Makes sure Redis publishes expired-key events. The project's own Redis starts with them on; an
 * external one may not, and may refuse CONFIG (managed services): then only the sweep makes red.
 */
export async function ensureExpiryEvents(redis: Redis, log: Logger): Promise<boolean> {
  // A cluster: every node, replicas too (keyspace events are per node, and a replica that takes
  // over publishes with its own setting).
  const cluster = asCluster(redis);
  const nodes: Redis[] = cluster ? cluster.nodes('all') : [redis];
  try {
    for (const node of nodes) {
      const got = (await node.config('GET', 'notify-keyspace-events')) as string[];
      const current = got[1] ?? '';
      const wanted = withExpiredEvents(current);
      if (wanted === null) continue;
      await node.config('SET', 'notify-keyspace-events', wanted);
      log.info({ from: current, to: wanted, node: `${node.options.host}:${node.options.port}` }, 'enabled Redis expired-key events (notify-keyspace-events)');
    }
    return true;
  } catch (e) {
    log.warn(
      { err: e },
      'cannot read or set notify-keyspace-events (Redis refuses CONFIG): unless it includes "Ex", only the sweep turns silent instances red, every LIGHT_SWEEP_INTERVAL_MS',
    );
    return false;
  }
}

/** How often a cluster's node list is looked at for nodes to listen to (a replica promoted, a node added). */
const NODES_CHECK_MS = 2000;

export class ExpiryListener {
  /** One subscriber per node: the one Redis, or every node of a cluster (by host:port). */
  private readonly subs = new Map<string, Redis>();
  /** A cluster: the client that knows its nodes. */
  private topology: Redis | null = null;
  private nodesTimer: NodeJS.Timeout | null = null;
  private readonly pending = new Set<string>();
  /** Ids of the batches being looked at or recorded (take()). */
  private readonly inFlight = new Set<string>();
  /** Instance id -> when it was first deferred, and its deadline (last heartbeat + timeout, ms). */
  private readonly deferred = new Map<string, { since: number; due: number }>();
  private deferTimer: NodeJS.Timeout | null = null;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private readonly instanceOf: (key: string) => string | null;

  constructor(
    private readonly redisUrl: string,
    redisPrefix: string,
    private readonly pool: Pool,
    private readonly sink: LightEventSink,
    private readonly params: LightParams,
    private readonly horizon: Horizon,
    private readonly batch: number,
    private readonly log: Logger,
    private readonly onEvents: (events: LightEvent[]) => void = () => {},
    /**
     * Before they are judged: drops these instances' heartbeat keys and returns the receive times
     * of their newest heartbeats still waiting in Redis (workers/heartbeat-state.ts
     * HeartbeatState.waiting), which the judgement takes as if written.
     */
    private readonly waiting: (ids: string[]) => Promise<WaitingHeartbeats> = async () => NO_WAITING,
    /** Redis's silence times (workers/light-sweep.ts): what this judged is settled there, so the sweep does not judge it again. */
    private readonly silences: SilenceTimes | null = null,
  ) {
    // Both layouts: an id is an id whether or not its key carries a cluster's group tag.
    const cluster = redisKeys(redisPrefix, { isCluster: true });
    this.instanceOf = (key) => cluster.instanceOfHeartbeatKey(key);
  }

  async start(): Promise<void> {
    const main = createRedis(this.redisUrl);
    const cluster = asCluster(main);
    if (!cluster) {
      await this.listen('redis', main);
      return;
    }
    // A cluster: every node publishes the events of its own keys, and a replica (silent while it
    // is one) publishes once promoted; so every node is listened to, and nodes that appear later
    // (a failover, a node added) are picked up within NODES_CHECK_MS. Events of a primary that
    // died before its replica took over are lost like any other: the sweep finds those instances.
    this.topology = main;
    main.on('error', (e) => this.log.warn({ err: e }, 'redis cluster (expiry listener) error'));
    await new Promise<void>((resolve, reject) => {
      if (main.status === 'ready') resolve();
      else {
        main.once('ready', () => resolve());
        main.once('end', () => reject(new Error('redis cluster connection ended')));
      }
    });
    await this.followNodes();
    this.nodesTimer = setInterval(() => void this.followNodes().catch((e) => this.log.warn({ err: e }, 'expiry listener: node list not read')), NODES_CHECK_MS);
    this.nodesTimer.unref();
  }

  private async followNodes(): Promise<void> {
    const cluster = asCluster(this.topology!);
    if (!cluster || this.stopped) return;
    const seen = new Set<string>();
    for (const node of cluster.nodes('all')) {
      const name = `${node.options.host}:${node.options.port}`;
      seen.add(name);
      if (this.subs.has(name)) continue;
      const sub = new Redis({ host: node.options.host, port: node.options.port, username: node.options.username, password: node.options.password, maxRetriesPerRequest: null });
      await this.listen(name, sub);
    }
    for (const [name, sub] of this.subs) {
      if (seen.has(name)) continue;
      this.subs.delete(name);
      sub.disconnect();
    }
  }

  private async listen(name: string, sub: Redis): Promise<void> {
    this.subs.set(name, sub);
    // Once per outage of the node, not at every reconnect attempt.
    let down = false;
    sub.on('error', (e) => {
      if (!down) this.log.warn({ err: e, node: name }, 'redis (expiry listener) error; reconnecting');
      down = true;
    });
    sub.on('ready', () => (down = false));
    const channel = `__keyevent@${sub.options.db ?? 0}__:expired`;
    // ioredis subscribes again by itself after a reconnect; what expired meanwhile is the sweep's.
    sub.on('message', (_ch: string, key: string) => this.onExpired(key));
    await sub.subscribe(channel);
    this.log.info({ channel, node: name }, 'listening for expired heartbeat keys');
  }

  private onExpired(key: string): void {
    if (this.stopped) return;
    const id = this.instanceOf(key);
    if (id === null || !UUID.test(id)) return;
    this.pending.add(id);
    if (!this.timer && !this.running) this.timer = setTimeout(() => this.kick(), GATHER_MS);
  }

  private kick(): void {
    this.timer = null;
    if (this.running) return;
    this.running = this.drain().finally(() => {
      this.running = null;
      if (this.pending.size && !this.stopped) this.timer = setTimeout(() => this.kick(), GATHER_MS);
    });
  }

  /**
   * Up to a batch of the pending instances, taken out of the pending set. An id that is in a batch
   * being looked at or recorded (it came back meanwhile: deferred, or its key expired again) stays
   * pending for a later batch, so no two batches under way hold the same instance.
   */
  private take(): string[] {
    const ids: string[] = [];
    for (const id of this.pending) {
      if (this.inFlight.has(id)) continue;
      ids.push(id);
      this.pending.delete(id);
      this.inFlight.add(id);
      if (ids.length >= this.batch) break;
    }
    return ids;
  }

  private async drain(): Promise<void> {
    // Three stages overlap, each one batch at a time and in order: the first look at the next
    // batch (Postgres: which are not red yet; Redis: their heartbeat keys dropped, their waiting
    // heartbeats' times read) while this one is recorded (Postgres), and the delivery of the
    // batches before (the sink's queue: ClickHouse, NATS, the outbox). A batch's first look ends
    // before its recording begins. At most MAX_QUEUED_BATCHES batches' changes wait
    // for delivery: with ClickHouse slow, recording waits for it rather than holding ever more
    // changes in memory. drain() ends only after its last delivery.
    let delivered: Promise<void> = Promise.resolve();
    let deferring: Promise<void> = Promise.resolve();
    let settling: Promise<void> = Promise.resolve();
    // A batch's first look drops the instances already red (the sweep, another worker's listener
    // or a report recorded them first: when Redis expires keys late, the sweep's dropping a key
    // is what makes Redis publish its expiry): judging those again cost as much as judging
    // them first, for nothing (bench/README.md "The listener's second look").
    const lookAt = (taken: string[]) => {
      const t0 = Date.now();
      const done = notRed(this.pool, taken).then(async (ids) => {
        const waiting = await this.waiting(ids);
        return { ids, waiting, lookMs: Date.now() - t0 };
      });
      done.catch(() => {}); // awaited below; never an unhandled rejection meanwhile
      return { taken, done };
    };
    const nextBatch = () => {
      if (this.pending.size === 0 || this.stopped) return null;
      const ids = this.take();
      return ids.length > 0 ? lookAt(ids) : null;
    };
    let next = nextBatch();
    while (next && !this.stopped) {
      const { taken, done } = next;
      next = null;
      try {
        const { ids, waiting, lookMs } = await done;
        if (ids.length < taken.length) {
          const lit = new Set(ids);
          for (const id of taken) if (!lit.has(id)) this.deferred.delete(id);
        }
        // The next batch's first look runs while this one is recorded.
        next = nextBatch();
        await this.sink.queuedAtMost(MAX_QUEUED_BATCHES * this.batch);
        const t1 = Date.now();
        // Rows the sweep (or a report) holds right now are skipped, not waited for: they are
        // among the unchanged ones below, and looked at again after DEFER_RETRY_MS.
        const horizonMs = await this.horizon.get();
        const recorded = await recordFreeTransitionsTx(this.pool, ids, 'expiry', this.params, horizonMs, waiting);
        const { events, skipped } = recorded;
        const recordMs = Date.now() - t1;
        // Judged (or already red): settled, except the rows someone else held; beside the next
        // batch's recording, not before it (until it is done the sweep may only find these again,
        // and finds them red).
        if (this.silences) {
          const held = new Set(skipped);
          const changedTo = new Map(events.map((e) => [e.instance_id, e.to]));
          const judged = taken.filter((id) => !held.has(id));
          const silences = this.silences;
          // Red at the first look (so not judged), or recorded red: no time to read.
          const lit = new Set(ids);
          settling = settling
            .then(() => afterJudgement(this.pool, silences, judged, horizonMs, (id) => !lit.has(id) || changedTo.get(id) === 'red', waiting))
            .catch((e) => this.log.warn({ err: e, instances: judged.length }, "silence times not settled; the sweep looks at them again"));
        }
        this.onEvents(events);
        const changed = new Set(events.map((e) => e.instance_id));
        for (const id of changed) this.deferred.delete(id);
        const unchanged = ids.filter((id) => !changed.has(id));
        const queuedAt = Date.now();
        const pendingNow = this.pending.size;
        delivered = this.sink.queue(recorded).then(() => {
          this.log.debug({ expired: taken.length, red: taken.length - ids.length, changes: events.length, lookMs, recordMs, deliveredAfterMs: Date.now() - queuedAt, waiting: pendingNow }, 'expired heartbeats handled');
        });
        deferring = deferring
          .then(() => this.deferUnsettled(unchanged, waiting))
          .catch((e) => {
            // The deferral's read failed (Postgres away): what is not red yet is the sweep's.
            this.log.warn({ err: e, instances: unchanged.length }, 'expired heartbeats not looked at again; the sweep will');
          });
      } catch (e) {
        // Postgres or Redis away: these instances are left to the sweep, which finds them by their times.
        this.log.warn({ err: e, instances: taken.length }, 'expired heartbeats not recorded; the sweep will');
      } finally {
        for (const id of taken) this.inFlight.delete(id);
      }
      next ??= nextBatch();
    }
    // Stopped with a first look under way: it finishes (it drops keys, writes nothing), unjudged.
    if (next) {
      await next.done.catch(() => {});
      for (const id of next.taken) this.inFlight.delete(id);
    }
    await Promise.all([delivered, deferring, settling]);
  }

  /** Of these (expired, not changed), the ones silent by the wall clock: the horizon is behind. */
  private async deferUnsettled(ids: string[], waiting: WaitingHeartbeats): Promise<void> {
    if (ids.length === 0) return;
    const silent = await silentButLit(this.pool, ids, waiting);
    const unsettled = new Map(silent.map((x) => [x.id, Number(x.due)]));
    for (const id of ids) if (!unsettled.has(id)) this.deferred.delete(id);
    const now = Date.now();
    for (const [id, due] of unsettled) {
      const since = this.deferred.get(id)?.since ?? now;
      if (now - since < DEFER_MAX_MS) this.deferred.set(id, { since, due });
      else this.deferred.delete(id);
    }
    this.scheduleDeferred();
  }

  /** Every DEFER_RETRY_MS, the deferred instances whose deadline the horizon has passed go again. */
  private scheduleDeferred(): void {
    if (this.deferred.size === 0 || this.deferTimer || this.stopped) return;
    this.deferTimer = setTimeout(() => {
      void this.horizon
        .get()
        .then((h) => {
          const now = Date.now();
          for (const [id, d] of this.deferred) {
            if (d.due < h) this.pending.add(id);
            else if (now - d.since >= DEFER_MAX_MS) this.deferred.delete(id);
          }
          if (this.pending.size && !this.timer && !this.running) this.timer = setTimeout(() => this.kick(), GATHER_MS);
        })
        .finally(() => {
          this.deferTimer = null;
          this.scheduleDeferred();
        });
    }, DEFER_RETRY_MS);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.deferTimer) clearTimeout(this.deferTimer);
    if (this.nodesTimer) clearInterval(this.nodesTimer);
    await this.running;
    await Promise.all([...this.subs.values()].map((sub) => sub.quit().catch(() => {})));
    this.subs.clear();
    await this.topology?.quit().catch(() => {});
  }
}
