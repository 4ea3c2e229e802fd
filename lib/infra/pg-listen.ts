// One Postgres connection held open for LISTEN, reconnecting on its own. Whoever keeps a copy of
// rows in memory and must drop it the moment they change (api/principal-cache.ts) listens here: a
// trigger's pg_notify reaches every listening process when its transaction commits.
//
// What the holder of a copy must know is not only the notices but whether it may trust that it
// gets them: `onState(true)` once LISTEN is in place, `onState(false)` the moment the connection is
// lost (a notice sent while nobody listened is lost with it), then retries every `retryMs`. A
// copy is safe only while the state is up, and only for rows read after it came up.
import pg from 'pg';

export interface PgListenOptions {
  url: string;
  channel: string;
  applicationName: string;
  onNotice(payload: string): void;
  onState(up: boolean): void;
  onError?(e: unknown): void;
  /** Asked after LISTEN, before `onState(true)`: false (e.g. the triggers that notify are not there yet) keeps the state down and asks again after `retryMs`. */
  ready?(c: pg.ClientBase): Promise<boolean>;
  retryMs?: number;
}

export class PgListener {
  private client: pg.Client | null = null;
  private closed = false;
  private timer: NodeJS.Timeout | null = null;
  up = false;

  constructor(private readonly o: PgListenOptions) {
    if (!/^[a-z_][a-z0-9_]*$/.test(o.channel)) throw new Error(`channel ${o.channel}: lower-case letters, digits and _ only`);
  }

  start(): void {
    void this.connect();
  }

  /** The backend's process id while up (tests end it with pg_terminate_backend). */
  get pid(): number | null {
    return (this.client as (pg.Client & { processID?: number }) | null)?.processID ?? null;
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const c = new pg.Client({ connectionString: this.o.url, application_name: this.o.applicationName });
    this.client = c;
    let lost = false;
    const down = (e?: unknown) => {
      if (lost) return;
      lost = true;
      if (e) this.o.onError?.(e);
      this.setState(false);
      c.removeAllListeners('notification');
      c.end().catch(() => {});
      if (this.client === c) this.client = null;
      if (!this.closed) this.timer = setTimeout(() => void this.connect(), this.o.retryMs ?? 1000);
    };
    c.on('error', down);
    c.on('end', () => down());
    c.on('notification', (n) => {
      if (n.channel === this.o.channel) this.o.onNotice(n.payload ?? '');
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${this.o.channel}`);
      while (this.o.ready && !(await this.o.ready(c))) {
        if (lost || this.closed) break;
        await new Promise((r) => (this.timer = setTimeout(r, this.o.retryMs ?? 1000)));
      }
      if (lost || this.closed) return void c.end().catch(() => {});
      this.setState(true);
    } catch (e) {
      down(e);
    }
  }

  private setState(up: boolean): void {
    if (this.up === up) return;
    this.up = up;
    this.o.onState(up);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.setState(false);
    const c = this.client;
    this.client = null;
    if (c) await c.end().catch(() => {});
  }
}
