// The sweep makes the stored traffic light exact: Redis expiry events are fire-and-forget, so a
// BullMQ repeatable job (every LIGHT_SWEEP_INTERVAL_MS) finds, from two sources,
//   - Redis's silence times (`hbdl`, workers/heartbeat-state.ts: when each heartbeat key expires),
//     exact while Postgres's heartbeat times lag the newest heartbeat: instances whose silence
//     changes their colour now;
//   - Postgres's recheck times (`instance_lights.recheck_at`, which every judgement stores:
//     lib/domain/traffic-light.ts recheckSql; a time a heartbeat moves comes there only after
//     Postgres's possible lag, as a backstop for a Redis that lost its times):
//   - instances not red whose deadline passed (last heartbeat + their timeout), instances green or
//     yellow whose late time passed (lib/store/timeout-rules.ts),
//   - instances stored yellow whose warning ran out (WARNING_WINDOW_S) and that are not degraded,
//   - instances in maintenance whose window ended, and those a timeout rule or a deleted window
//     asked to be judged again,
// and records their changes (the same conditional UPDATE as every other path, so a change the
// expiry listener records at the same moment is still recorded once). It also delivers changes
// left in the outbox by a worker that died or could not reach ClickHouse, and finishes a timeout
// rule's recompute that its api left half-way (lib/store/timeout-rules.ts). It judges the instances
// of a maintenance window that began (once per occurrence) and those whose window ended.
//
// A scheduled job (workers/jobs.ts) gives each run to one worker, and a Postgres advisory lock makes
// sure that a run which outlasts the interval is never overlapped by the next one on another worker.
import type { Pool } from '../lib/infra/postgres.js';
import { NO_WAITING, type LightEvent, type WaitingHeartbeats } from '../lib/domain/traffic-light.js';
import { instancesDueForSweep, notRed, silenceTimes } from '../lib/store/instances.js';
import { tryLightSweepLock, releaseLightSweepLock } from '../lib/store/light-events.js';
import { recomputeCustomer, unfinishedRecomputes } from '../lib/store/timeout-rules.js';
import { instancesEnteringMaintenance, markEntered, occurrencesToEnter } from '../lib/store/maintenance.js';
import { recordFreeTransitionsTx, recordTransitionsTx, type Horizon, type LightEventSink, type LightParams } from './traffic-light.js';

/** Outbox rows younger than this belong to a delivery still in progress. */
const OUTBOX_GRACE_MS = 5000;
/** A timeout-rule recompute asked for longer ago than this was left half-way by its api: finished here. */
const RECOMPUTE_GRACE_S = 60;

/** Redis's silence times (HeartbeatState implements it). */
export interface SilenceTimes {
  /** Instances whose silence time is at most `horizonMs`, about `limit`; `more`: there are more. */
  dueSilences(horizonMs: number, limit: number): Promise<{ ids: string[]; more: boolean }>;
  /**
   * These were judged at `horizonMs`: their times up to it go, and `times` (as Postgres has them
   * after the judgement) replace Redis's, in one step.
   */
  settleSilences(ids: string[], horizonMs: number, times: { id: string; at: number }[]): Promise<void>;
}

/**
 * After a judgement at `horizonMs` of `judged` (`red`: those known red, which have none to put
 * back: recorded red by it, or found red, or gone, by the first look and so not judged): their
 * times up to the horizon go, and those still green or yellow get their silence time as the
 * judgement saw it: Postgres's, with the newest heartbeat that waits in Redis (`waiting`, as the
 * judgement took it). Their heartbeat keys were dropped before the judgement, so until their next
 * heartbeat nothing else would put a time there; without it a silence would be found only at the
 * stored recheck time, which is later by Postgres's possible lag; and with Postgres's time alone
 * (older), the sweep would find them again every round until the flusher wrote the heartbeat.
 */
export async function afterJudgement(
  pool: Pool,
  silences: SilenceTimes,
  judged: string[],
  horizonMs: number,
  red: (id: string) => boolean = () => false,
  waiting: WaitingHeartbeats = NO_WAITING,
): Promise<void> {
  if (judged.length === 0) return;
  // Those known red have no silence time to put back: not read (when 100,000 fell silent at once,
  // the reads of those the other of sweep and listener had turned red were 0.37 s of Postgres,
  // for no row: bench/README.md "Known red, not read again"). A report that turned one green
  // meanwhile set its new heartbeat key and silence time itself, later than the horizon, so the
  // settling leaves that. Read first, so that a failure leaves everything as it was (the sweep
  // finds them again), never settled without a time.
  const lit = judged.filter((id) => !red(id));
  const times = lit.length > 0 ? await silenceTimes(pool, lit, waiting) : [];
  await silences.settleSilences(judged, horizonMs, times);
}

export interface SweepResult {
  ran: boolean;
  changes: number;
  redelivered: number;
}

export class LightSweep {
  constructor(
    private readonly pool: Pool,
    private readonly sink: LightEventSink,
    private readonly params: LightParams,
    private readonly horizon: Horizon,
    private readonly opts: { batch: number },
    private readonly onEvents: (events: LightEvent[]) => void = () => {},
    /**
     * Before they are judged: drops these instances' heartbeat keys and returns the receive times
     * of their newest heartbeats still waiting in Redis (workers/heartbeat-state.ts
     * HeartbeatState.waiting), which the judgement takes as if written.
     */
    private readonly waiting: (ids: string[]) => Promise<WaitingHeartbeats> = async () => NO_WAITING,
    /** A customer's rules were recomputed here (the workers' copies are stale: TimeoutRuleHints). */
    private readonly rulesChanged: (customerId: string) => void = () => {},
    /** Redis's silence times (none: the recheck times alone, exact only while Postgres does not lag). */
    private readonly silences: SilenceTimes | null = null,
  ) {}

  /** One run; skipped (ran: false) while another worker's run holds the lock. */
  async sweep(): Promise<SweepResult> {
    const lockClient = await this.pool.connect();
    try {
      if (!(await tryLightSweepLock(lockClient))) return { ran: false, changes: 0, redelivered: 0 };
      try {
        const redelivered = await this.sink.drainOutbox(OUTBOX_GRACE_MS, this.opts.batch);
        for (const customerId of await unfinishedRecomputes(this.pool, RECOMPUTE_GRACE_S)) {
          await recomputeCustomer(this.pool, customerId);
          this.rulesChanged(customerId);
        }
        let changes = 0;
        // Maintenance windows that began: their instances are judged (maintenance) once, from the
        // window's side; each judged one records the window's end and is not returned again.
        for (const o of await occurrencesToEnter(this.pool, await this.horizon.get())) {
          let last = '';
          let done = false;
          for (let round = 0; round < 10_000; round++) {
            const ids = await instancesEnteringMaintenance(this.pool, o, this.opts.batch);
            if (ids.length === 0) {
              done = true;
              break;
            }
            // The same ones again: judged before the window began (a horizon behind): the next run.
            if (ids.join() === last) break;
            last = ids.join();
            const recorded = await recordTransitionsTx(this.pool, ids, 'sweep', this.params, await this.horizon.get());
            this.onEvents(recorded.events);
            await this.sink.deliverOrLeave(recorded);
            changes += recorded.events.length;
          }
          if (done) await markEntered(this.pool, o);
        }
        // Each candidate is judged (with the time of a heartbeat waiting in Redis), which stores
        // its next recheck time after the judgement (or it was just judged by someone else), so it
        // is not found again; the same candidates twice (rows held by others, or a recheck time that does
        // not follow the colour's rule) end the run, and the bound guards against anything else.
        let last = '';
        // A round's delivery (ClickHouse, NATS, the outbox) runs while the next round is judged:
        // the sink's queue delivers one batch at a time, in order (this worker's expiry listener
        // queues there too), and the run ends only after its last round is delivered (so before
        // the next run's outbox drain could take them for undelivered).
        let delivered: Promise<void> = Promise.resolve();
        try {
          for (let round = 0; round < 10_000; round++) {
            const horizon = await this.horizon.get();
            const [fromPostgres, redisDue] = await Promise.all([
              instancesDueForSweep(this.pool, this.opts.batch, horizon),
              this.silences ? this.silences.dueSilences(horizon, this.opts.batch) : Promise.resolve({ ids: [], more: false }),
            ]);
            const fromRedis = redisDue.ids;
            if (fromPostgres.length === 0 && fromRedis.length === 0) break;
            const seen = `${fromPostgres.join()}|${fromRedis.join()}`;
            if (seen === last) break;
            last = seen;
            // Redis's candidates already red (the expiry listener or a report recorded them) or gone
            // are settled without a judgement.
            const lit = fromRedis.length > 0 ? await notRed(this.pool, fromRedis) : [];
            const ids = [...new Set([...fromPostgres, ...lit])];
            let skipped: string[] = [];
            let turnedRed = new Set<string>();
            let waiting: WaitingHeartbeats = NO_WAITING;
            if (ids.length > 0) {
              // Judged with the newest heartbeat, which may wait in Redis (its key dropped first).
              waiting = await this.waiting(ids);
              // Candidates another transaction holds (the expiry listener recording the same silence,
              // a report) are skipped, not waited for; whatever that leaves unchanged is found by the
              // next round or run.
              const recorded = await recordFreeTransitionsTx(this.pool, ids, 'sweep', this.params, horizon, waiting);
              skipped = recorded.skipped;
              turnedRed = new Set(recorded.events.filter((e) => e.to === 'red').map((e) => e.instance_id));
              this.onEvents(recorded.events);
              delivered = this.sink.queue(recorded);
              changes += recorded.events.length;
            }
            if (this.silences) {
              // Before the next round reads its candidates (else it would read these again).
              const held = new Set(skipped);
              const judged = [...new Set([...fromRedis, ...ids])].filter((id) => !held.has(id));
              // Not judged (red or gone at the first look), or recorded red: no time to read.
              const judgedNow = new Set(ids);
              await afterJudgement(this.pool, this.silences, judged, horizon, (id) => turnedRed.has(id) || !judgedNow.has(id), waiting);
            }
            const full = fromPostgres.length >= this.opts.batch || redisDue.more;
            if (!full || (ids.length > 0 && skipped.length === ids.length)) break;
          }
        } finally {
          await delivered;
        }
        return { ran: true, changes, redelivered };
      } finally {
        await releaseLightSweepLock(lockClient);
      }
    } finally {
      lockClient.release();
    }
  }
}
