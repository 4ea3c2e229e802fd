// The live feed: one EventSource on GET /api/fleet/stream (the session cookie authenticates it) for
// the whole page, shared by every view. Delivery is best effort, so every (re)connect tells the
// views to read the lists again ('open'); a stream that cannot be opened at all (refused, not
// there, too many clients) falls back to polling and is tried again every 30 s.
import { useEffect, useState } from 'preact/hooks';
import type { LightEvent } from './types.js';

export type LiveState = 'connecting' | 'live' | 'polling';
export type LiveMessage = { type: 'light'; event: LightEvent } | { type: 'open' };

const STREAM = '/api/fleet/stream';
const RETRY_MS = 30_000;

export class LiveFeed {
  state: LiveState = 'connecting';
  private es: EventSource | null = null;
  private retry: ReturnType<typeof setTimeout> | null = null;
  private readonly listeners = new Set<(m: LiveMessage) => void>();
  private readonly stateListeners = new Set<(s: LiveState) => void>();

  start(): void {
    this.stop();
    this.setState('connecting');
    const es = new EventSource(STREAM, { withCredentials: true });
    this.es = es;
    es.addEventListener('open', () => {
      this.setState('live');
      this.emit({ type: 'open' });
    });
    es.addEventListener('light', (e) => {
      try {
        this.emit({ type: 'light', event: JSON.parse((e as MessageEvent<string>).data) as LightEvent });
      } catch {
        /* not an event of ours */
      }
    });
    es.addEventListener('error', () => {
      if (es.readyState === EventSource.CLOSED) {
        // Refused (401/403/404/503): the browser gives up; poll and try again later.
        this.es = null;
        this.setState('polling');
        this.retry = setTimeout(() => this.start(), RETRY_MS);
      } else {
        this.setState('connecting'); // the browser reconnects by itself (retry: from the server)
      }
    });
  }

  stop(): void {
    this.es?.close();
    this.es = null;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
  }

  subscribe(f: (m: LiveMessage) => void): () => void {
    this.listeners.add(f);
    return () => void this.listeners.delete(f);
  }

  onState(f: (s: LiveState) => void): () => void {
    this.stateListeners.add(f);
    return () => void this.stateListeners.delete(f);
  }

  private emit(m: LiveMessage): void {
    for (const f of this.listeners) f(m);
  }

  private setState(s: LiveState): void {
    if (s === this.state) return;
    this.state = s;
    for (const f of this.stateListeners) f(s);
  }
}

export const live = new LiveFeed();

/** Calls `f` for every live message while the component is mounted. */
export function useLive(f: (m: LiveMessage) => void, deps: unknown[] = []): void {
  // eslint-disable-next-line react-hooks/exhaustive-deps
  useEffect(() => live.subscribe(f), deps);
}

export function useLiveState(): LiveState {
  const [s, setS] = useState(live.state);
  useEffect(() => live.onState(setS), []);
  return s;
}
