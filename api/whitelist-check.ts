// The api's check of a customer's whitelist rule set against SUFFIX_CHAIN_MAX, off the event loop.
// The check compiles the customer's message patterns as the workers do (lib/domain/whitelist.ts): for the
// largest set the limits allow (1,000 patterns of 512 characters) that is about 0.4 s of CPU, which
// on the api's event loop would hold every other customer's requests for as long. So it runs in one
// worker thread per api process, one check at a time; a customer whose check is already running or
// waiting gets 429 for another write (one customer can queue one check, never the others' turn).
import { Worker } from 'node:worker_threads';
import { HttpError } from '../lib/contract/errors.js';
import type { RuleRow } from '../lib/domain/whitelist.js';

export interface ChainCheck {
  /** The longest suffix chain of the set after the write, and before it. */
  after: number;
  before: number;
  /** The texts of the longest chain after the write (for the 409's detail). */
  chain: string[];
}

interface Job {
  id: number;
  customerId: string;
  rows: RuleRow[];
  rule: RuleRow;
  replaces: string | null;
  resolve: (c: ChainCheck) => void;
  reject: (e: unknown) => void;
}

export class WhitelistChecks {
  private worker: Worker | null = null;
  private readonly queue: Job[] = [];
  private running: Job | null = null;
  private readonly busy = new Set<string>();
  private nextId = 1;

  /** Checks `rule` (replacing rule `replaces`, or new) against the customer's other `rows`. */
  check(customerId: string, rows: RuleRow[], rule: RuleRow, replaces: string | null): Promise<ChainCheck> {
    if (this.busy.has(customerId)) {
      return Promise.reject(new HttpError(429, 'a whitelist change of this customer is being checked; send the next one when it is done', { retryAfterS: 1 }));
    }
    this.busy.add(customerId);
    return new Promise<ChainCheck>((resolve, reject) => {
      this.queue.push({ id: this.nextId++, customerId, rows, rule, replaces, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    if (this.running || this.queue.length === 0) return;
    const job = (this.running = this.queue.shift()!);
    const w = this.thread();
    w.postMessage({ id: job.id, rows: job.rows, rule: job.rule, replaces: job.replaces });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(new URL('./whitelist-check-thread.js', import.meta.url));
    w.unref();
    w.on('message', (m: { id: number; result?: ChainCheck; error?: string }) => this.done(m.id, m.result, m.error));
    w.on('error', (e) => this.fail(e));
    w.on('exit', () => {
      this.worker = null;
      this.fail(new Error('the whitelist check thread exited'));
    });
    this.worker = w;
    return w;
  }

  private done(id: number, result: ChainCheck | undefined, error: string | undefined): void {
    const job = this.running;
    if (!job || job.id !== id) return;
    this.running = null;
    this.busy.delete(job.customerId);
    if (result) job.resolve(result);
    else job.reject(new Error(error ?? 'whitelist check failed'));
    this.pump();
  }

  private fail(e: unknown): void {
    const job = this.running;
    this.running = null;
    if (job) {
      this.busy.delete(job.customerId);
      job.reject(e);
    }
    this.pump();
  }

  async close(): Promise<void> {
    await this.worker?.terminate();
  }
}
