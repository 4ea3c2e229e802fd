// The live stream of traffic-light changes (Server-Sent Events, GET /api/fleet/stream). Workers
// publish every change they record on core NATS `${SUBJECT_PREFIX}.control.light.<customer id>`;
// each api replica subscribes once to `…control.light.*` and writes each message to the open
// streams of that customer only. Nothing is polled per client.
//
// Delivery is best effort, like any live view: a client that reconnects (the browser's EventSource
// does by itself, after `retry`) re-reads GET /api/instances, which is always right. A client that
// does not keep up (more than MAX_BUFFERED bytes waiting) is disconnected rather than buffered
// without bound.
//
// A stream is authorised when it opens, and again every SESSION_STREAM_RECHECK_MS (2 s by
// default): one query per replica for all its open streams (api/stream-auth.ts) asks whether each
// stream's session still holds (not logged out, password not changed, not signed out) and its user
// is still a member of the customer, or whether its API token is still unrevoked. A stream that
// fails gets `event: ended` and is closed; the browser's reconnect then gets 401 or 403. A check
// that cannot run (Postgres away) leaves the streams as they are until one succeeds.
import type { ServerResponse } from 'node:http';
import type { NatsConnection, Subscription } from 'nats';
import type { Logger } from '../lib/infra/log.js';
import { subjects } from '../lib/contract/messages.js';
import { publicLightEvent, type LightMessage } from '../lib/domain/traffic-light.js';

const MAX_BUFFERED = 1024 * 1024;

/** Who opened a stream: what the periodic check asks about. */
export type StreamAuth = { kind: 'user'; sessionId: string; customerId: string } | { kind: 'token'; tokenId: string };

export const streamAuthKey = (a: StreamAuth) => (a.kind === 'user' ? `s:${a.sessionId}:${a.customerId}` : `t:${a.tokenId}`);

interface Client {
  res: ServerResponse;
  keepalive: NodeJS.Timeout;
  auth: StreamAuth;
}

export class LightHub {
  private readonly clients = new Map<string, Set<Client>>();
  private size = 0;
  private sub: Subscription | null = null;
  private recheck: NodeJS.Timeout | null = null;
  private checking = false;

  constructor(
    private readonly log: Logger,
    private readonly keepaliveS: number,
    readonly maxClients: number,
    private readonly onSent: (n: number) => void = () => {},
  ) {}

  get count(): number {
    return this.size;
  }

  /** Open streams of one customer on this replica (the quota stream_connections). */
  countOf(customerId: string): number {
    return this.clients.get(customerId)?.size ?? 0;
  }

  /** Subscribes to every customer's changes; called once NATS is connected. */
  attach(nc: NatsConnection, subjectPrefix: string): void {
    const subject = subjects(subjectPrefix).control('light.*');
    const head = subject.slice(0, -1);
    this.sub = nc.subscribe(subject);
    void (async () => {
      for await (const m of this.sub!) {
        const customerId = m.subject.slice(head.length);
        const set = this.clients.get(customerId);
        if (!set || set.size === 0) continue;
        let msg: LightMessage;
        try {
          msg = m.json<LightMessage>();
        } catch {
          continue;
        }
        if (!msg || !Array.isArray(msg.events)) continue;
        const text = msg.events.map((e) => `id: ${e.id}\nevent: light\ndata: ${JSON.stringify(publicLightEvent(e))}\n\n`).join('');
        for (const c of [...set]) this.write(customerId, c, text);
        this.onSent(msg.events.length * set.size);
      }
    })().catch((e) => this.log.warn({ err: e }, 'light stream subscription ended'));
    this.log.info({ subject }, 'live traffic-light stream subscribed');
  }

  /**
   * Re-checks every open stream's session or token each `everyMs`: `stillValid` gets the distinct
   * auths and returns the keys (streamAuthKey) of those that still hold; the other streams end.
   */
  recheckWith(everyMs: number, stillValid: (auths: StreamAuth[]) => Promise<Set<string>>): void {
    if (this.recheck) clearInterval(this.recheck);
    this.recheck = setInterval(() => void this.recheckNow(stillValid), everyMs);
    this.recheck.unref();
  }

  private async recheckNow(stillValid: (auths: StreamAuth[]) => Promise<Set<string>>): Promise<void> {
    if (this.checking || this.size === 0) return;
    this.checking = true;
    try {
      const auths = new Map<string, StreamAuth>();
      for (const set of this.clients.values()) for (const c of set) auths.set(streamAuthKey(c.auth), c.auth);
      const valid = await stillValid([...auths.values()]);
      let ended = 0;
      for (const [customerId, set] of [...this.clients]) {
        for (const c of [...set]) {
          // A stream opened while the check ran, by an auth it did not ask about, was authorised
          // when it opened; the next check judges it. (Closing it here once ended a stream that had
          // just been let in, its slot of the customer's quota freed behind the client's back.)
          const key = streamAuthKey(c.auth);
          if (!auths.has(key) || valid.has(key)) continue;
          this.remove(customerId, c);
          c.res.end(`event: ended\ndata: {"detail":"session or token ended"}\n\n`);
          ended++;
        }
      }
      if (ended) this.log.info({ streams: ended }, 'live streams closed: their session or token ended');
    } catch (e) {
      this.log.warn({ err: e }, 'live stream authorisation re-check failed; streams stay open until the next check');
    } finally {
      this.checking = false;
    }
  }

  /** Takes over an HTTP response as an event stream of `customerId`'s changes, opened by `auth`. */
  open(customerId: string, res: ServerResponse, auth: StreamAuth): void {
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      Connection: 'keep-alive',
      // Tell nginx-style proxies not to buffer the stream.
      'X-Accel-Buffering': 'no',
    });
    res.write(`retry: 3000\n: connected\n\n`);
    const c: Client = {
      res,
      auth,
      keepalive: setInterval(() => this.write(customerId, c, ': keepalive\n\n'), this.keepaliveS * 1000),
    };
    let set = this.clients.get(customerId);
    if (!set) this.clients.set(customerId, (set = new Set()));
    set.add(c);
    this.size++;
    const drop = () => this.remove(customerId, c);
    res.on('close', drop);
    res.on('error', drop);
  }

  private write(customerId: string, c: Client, text: string): void {
    if (c.res.writableLength > MAX_BUFFERED) {
      this.log.warn({ customerId }, 'live stream client too slow; disconnecting it');
      this.remove(customerId, c);
      c.res.destroy();
      return;
    }
    c.res.write(text);
  }

  private remove(customerId: string, c: Client): void {
    const set = this.clients.get(customerId);
    if (!set?.delete(c)) return;
    clearInterval(c.keepalive);
    this.size--;
    if (set.size === 0) this.clients.delete(customerId);
  }

  /** Ends every stream (shutdown): clients reconnect to another replica. */
  close(): void {
    this.sub?.unsubscribe();
    if (this.recheck) clearInterval(this.recheck);
    for (const [customerId, set] of this.clients) {
      for (const c of [...set]) {
        this.remove(customerId, c);
        c.res.end();
      }
    }
  }
}
