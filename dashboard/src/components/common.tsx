// Small pieces every page uses: the traffic light, the page heading, loading and error states,
// sections, lists and tables of what the API returned, a copy button, and a hook that reads an API
// path.
import type { ComponentChildren, VNode } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, get } from '../api.js';
import { useApp } from '../ctx.js';
import { reasonText } from '../i18n.js';
import type { Light } from '../types.js';

/** The colour as a shape and a word: never colour alone. */
export function LightBadge({ light, reason, compact }: { light: Light; reason?: string | null; compact?: boolean }) {
  const { t } = useApp();
  const word = t(`light.${light}`);
  return (
    <span class={`light light-${light}${compact ? ' compact' : ''}`} title={reason ? reasonText(reason, t) : undefined} data-light={light}>
      <LightShape light={light} />
      <span class="light-word">{word}</span>
    </span>
  );
}

export function LightShape({ light }: { light: Light }) {
  // green: circle, yellow: triangle, late: diamond, red: square (a stop sign), grey: ring,
  // maintenance: a bar (paused).
  return (
    <svg class="light-shape" viewBox="0 0 16 16" width="14" height="14" aria-hidden="true" focusable="false">
      {light === 'green' && <circle cx="8" cy="8" r="7" />}
      {light === 'yellow' && <path d="M8 1 L15 14.5 L1 14.5 Z" />}
      {light === 'late' && <path d="M8 0.5 L15.5 8 L8 15.5 L0.5 8 Z" />}
      {light === 'maintenance' && <rect x="1" y="5.5" width="14" height="5" rx="1" />}
      {light === 'red' && <rect x="1.5" y="1.5" width="13" height="13" rx="2" />}
      {light === 'grey' && <circle cx="8" cy="8" r="5.5" fill="none" stroke-width="3" />}
    </svg>
  );
}

/** The page's heading; the app moves the focus to it (#page-title) after each navigation. */
export function PageTitle({ children }: { children: ComponentChildren }) {
  return (
    <h1 id="page-title" tabIndex={-1}>
      {children}
    </h1>
  );
}

/** In place of a page whose subject is not there: the heading and the way back to the fleet. */
export function NotFoundNote({ title }: { title: string }) {
  const { t } = useApp();
  return (
    <>
      <PageTitle>{title}</PageTitle>
      <p>
        <a href="/">{t('instance.backToFleet')}</a>
      </p>
    </>
  );
}

/** Links to the sections of a long page, by `[id, title]` (false: left out). */
export function JumpLinks({ label, links }: { label: string; links: ([id: string, title: string] | false)[] }) {
  return (
    <nav class="jump" aria-label={label}>
      {links.map((l) => l && <a key={l[0]} href={`#${l[0]}`}>{l[1]}</a>)}
    </nav>
  );
}

export function Loading() {
  const { t } = useApp();
  return (
    <p class="muted" role="status">
      {t('common.loading')}
    </p>
  );
}

/** In place of a part the server does not offer (see missingFeature). */
export function Unavailable() {
  const { t } = useApp();
  return <p class="muted">{t('common.unavailable')}</p>;
}

export function ErrorNote({ error, onRetry }: { error: unknown; onRetry?: () => void }) {
  const { t } = useApp();
  const e = error as ApiError;
  const msg =
    e?.status === 403 ? t('common.forbidden', { detail: e.detail }) : e?.status === 404 ? t('common.notFoundDetail', { detail: e.detail }) : e?.detail ?? String(error);
  return (
    <div class="note error" role="alert">
      <span>{msg}</span>
      {onRetry && (
        <button type="button" class="link" onClick={onRetry}>
          {t('common.retry')}
        </button>
      )}
    </div>
  );
}

/**
 * A card with a heading. `busy` (when given) becomes `aria-busy`: true while the section's data is
 * being fetched, so screen readers wait for it, and so do the browser tests, which read a section
 * only once it says it is settled.
 */
export function Section({ id, title, children, actions, busy }: { id: string; title: ComponentChildren; children: ComponentChildren; actions?: ComponentChildren; busy?: boolean }) {
  return (
    <section class="card" id={id} aria-labelledby={`${id}-h`} aria-busy={busy === undefined ? undefined : busy ? 'true' : 'false'}>
      <div class="card-head">
        <h2 id={`${id}-h`}>{title}</h2>
        {actions && <div class="card-actions">{actions}</div>}
      </div>
      {children}
    </section>
  );
}

/** A table's header row: a column per label, then (`hidden`) a column named for screen readers only. */
export function TableHead({ cols, hidden }: { cols: ComponentChildren[]; hidden?: string }) {
  return (
    <thead>
      <tr>
        {cols.map((c, i) => (
          <th key={i} scope="col">
            {c}
          </th>
        ))}
        {hidden !== undefined && (
          <th scope="col">
            <span class="sr-only">{hidden}</span>
          </th>
        )}
      </tr>
    </thead>
  );
}

/**
 * A box that scrolls when its content is too wide (or tall): focusable and named, so keyboard users
 * can scroll it too (WCAG: scrollable regions must be reachable).
 */
export function Scroll({ label, children, class: cls }: { label: string; children: ComponentChildren; class?: string }) {
  return (
    <div class={`scroll${cls ? ` ${cls}` : ''}`} tabIndex={0} role="region" aria-label={label}>
      {children}
    </div>
  );
}

/**
 * A list the API returned: nothing while it is not there, `none` (a muted line) when it is empty,
 * otherwise `children` with the items. Without `none`, an empty list goes to `children` too.
 */
export function Listed<T>({ items, none, children }: { items: T[] | null | undefined; none?: ComponentChildren; children: (items: T[]) => ComponentChildren }) {
  if (!items) return null;
  if (items.length === 0 && none !== undefined) return <p class="muted">{none}</p>;
  return <>{children(items)}</>;
}

/**
 * A list the API returned as a scrolling table (see Listed, Scroll and TableHead): a `row` per item,
 * `children` after the table.
 */
export function DataTable<T>(props: {
  items: T[] | null | undefined;
  none?: ComponentChildren;
  label: string;
  class: string;
  cols: ComponentChildren[];
  hidden?: string;
  row: (item: T) => VNode;
  children?: ComponentChildren;
}) {
  return (
    <Listed items={props.items} none={props.none}>
      {(items) => (
        <Scroll label={props.label}>
          <table class={props.class}>
            <TableHead cols={props.cols} hidden={props.hidden} />
            <tbody>{items.map(props.row)}</tbody>
          </table>
          {props.children}
        </Scroll>
      )}
    </Listed>
  );
}

/** Copies `text`; where the Clipboard API is missing (plain http), selects it for Ctrl+C instead. */
export function CopyButton({ text, targetId, label }: { text: string; targetId?: string; label?: string }) {
  const { t } = useApp();
  const [done, setDone] = useState<'copied' | 'select' | null>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone('copied');
    } catch {
      const el = targetId ? document.getElementById(targetId) : null;
      if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement) {
        el.focus();
        el.select();
      }
      setDone('select');
    }
  };
  return (
    <>
      <button type="button" onClick={copy}>
        {label ?? t('common.copy')}
      </button>
      <span class="muted small" role="status" aria-live="polite">
        {done === 'copied' ? t('common.copied') : done === 'select' ? t('common.copySelect') : ''}
      </span>
    </>
  );
}

export interface Fetched<T> {
  data: T | null;
  error: unknown;
  loading: boolean;
  reload: () => Promise<void>;
  setData: (f: (d: T | null) => T | null) => void;
}

/** Reads `path` (null: nothing) when it changes; `reload` reads again keeping what is shown. */
export function useFetch<T>(path: string | null): Fetched<T> {
  const [state, setState] = useState<{ data: T | null; error: unknown; loading: boolean }>({ data: null, error: null, loading: path !== null });
  const seq = useRef(0);
  const reload = useCallback(async () => {
    if (path === null) return;
    const n = ++seq.current;
    setState((s) => ({ ...s, loading: true }));
    try {
      const data = await get<T>(path);
      if (n === seq.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (n === seq.current) setState((s) => ({ data: s.data, error, loading: false }));
    }
  }, [path]);
  useEffect(() => {
    setState({ data: null, error: null, loading: path !== null });
    void reload();
  }, [reload]);
  const setData = useCallback((f: (d: T | null) => T | null) => setState((s) => ({ ...s, data: f(s.data) })), []);
  return { ...state, reload, setData };
}

/** Runs `f` every `ms` while the tab is visible (and once when it becomes visible again). */
export function useInterval(f: () => void, ms: number | null): void {
  const saved = useRef(f);
  saved.current = f;
  useEffect(() => {
    if (ms === null) return;
    const id = setInterval(() => {
      if (document.visibilityState === 'visible') saved.current();
    }, ms);
    const vis = () => {
      if (document.visibilityState === 'visible') saved.current();
    };
    document.addEventListener('visibilitychange', vis);
    return () => {
      clearInterval(id);
      document.removeEventListener('visibilitychange', vis);
    };
  }, [ms]);
}

/** `Promise`-returning action with a busy flag and its error, for buttons and forms. */
export function useAction<A extends unknown[]>(f: (...a: A) => Promise<unknown>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = async (...a: A) => {
    setBusy(true);
    setError(null);
    try {
      await f(...a);
      return true;
    } catch (e) {
      setError(e);
      return false;
    } finally {
      setBusy(false);
    }
  };
  return { run, busy, error, setError };
}
