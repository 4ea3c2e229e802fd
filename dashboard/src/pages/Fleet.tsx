// The fleet: every instance with its traffic light, grouped and sorted the way the agents ask
// (group, group_priority, sort_priority, location), filtered by colour and machine name, with counts
// per colour. Paged on the server (PAGE rows at a time: a fleet of 100,000 instances is one page
// read, never 100,000 rows in the browser): grouped views page by offset, the flat view by the
// list's keyset cursor (`next`). Filters go to the server too (`light`, `q`), and the counts come
// from the fleet summary with the same filter. Colours change live from the event stream; the page
// is read again on every (re)connect of the stream and, as a safety net, every minute (every 10 s
// while the stream is down). Each row shows when its instance turns red if no heartbeat comes (its
// deadline, relative; the absolute time in its tooltip), read again when one comes back from late or red.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { get, qs } from '../api.js';
import { useApp } from '../ctx.js';
import { reasonText } from '../i18n.js';
import { ago, shortTime } from '../format.js';
import { useLive, useLiveState } from '../live.js';
import { navigate, useLocation } from '../router.js';
import type { FleetSummary, Instance, InstanceList, Light } from '../types.js';
import { ErrorNote, LightBadge, LightShape, Loading, PageTitle, TableHead, useFetch, useInterval } from '../components/common.js';
import { Field } from '../components/forms.js';
import { useTitle } from '../components/title.js';

const LIGHTS: Light[] = ['red', 'late', 'yellow', 'green', 'grey', 'maintenance'];
export const PAGE = 100;
type GroupBy = 'group' | 'location' | 'none';
/** Where a page starts: an offset (grouped views) or the previous page's cursor (flat view). */
type Start = number | string | null;

function listPath(by: GroupBy, light: Light | null, q: string, start: Start): string {
  const common = { light, q, limit: PAGE, offset: typeof start === 'number' && start > 0 ? start : null, after: typeof start === 'string' ? start : null };
  if (by === 'group') return `/api/instances${qs({ group_by: 'group', sort: 'group_priority,sort_priority,location,machine,software', ...common })}`;
  if (by === 'location') return `/api/instances${qs({ group_by: 'location', sort: 'group_priority,sort_priority,machine,software', ...common })}`;
  return `/api/instances${qs({ sort: 'group,group_priority,sort_priority,location,machine,software', ...common })}`;
}

export function FleetPage() {
  const { t, lang } = useApp();
  useTitle(t('fleet.title'));
  const loc = useLocation();
  const by = (['group', 'location', 'none'].includes(loc.search.get('by') ?? '') ? loc.search.get('by') : 'group') as GroupBy;
  const lightFilter = (LIGHTS as string[]).includes(loc.search.get('light') ?? '') ? (loc.search.get('light') as Light) : null;
  const [q, setQ] = useState(loc.search.get('q') ?? '');
  const appliedQ = (loc.search.get('q') ?? '').trim();
  // The starts of the pages up to the one shown (the last); a new filter or grouping starts over.
  const [starts, setStarts] = useState<Start[]>([null]);
  const view = `${by}|${lightFilter ?? ''}|${appliedQ}`;
  const lastView = useRef(view);
  const current = lastView.current === view ? starts : [null];
  useEffect(() => {
    if (lastView.current !== view) {
      lastView.current = view;
      setStarts([null]);
    }
  }, [view]);
  const start = current[current.length - 1] ?? null;
  const list = useFetch<InstanceList>(listPath(by, lightFilter, appliedQ, start));
  const summaryPath = `/api/fleet/summary${qs({ q: appliedQ })}`;
  const [summary, setSummary] = useState<FleetSummary | null>(null);
  const [changed, setChanged] = useState<Record<string, number>>({});
  const [announce, setAnnounce] = useState('');
  const lastSeq = useRef<Record<string, number>>({});
  const shownIds = useRef(new Set<string>());
  shownIds.current = useMemo(() => new Set((list.data?.items ?? []).map((i) => i.id)), [list.data]);
  const reloadSoon = useRef<ReturnType<typeof setTimeout> | null>(null);
  const liveState = useLiveState();
  const [, tick] = useState(0);

  const setParam = (k: string, v: string | null) => {
    const p = new URLSearchParams(location.search);
    if (v === null || v === '') p.delete(k);
    else p.set(k, v);
    const s = p.toString();
    navigate(`/${s ? `?${s}` : ''}`, { replace: true });
  };

  // Keep the text filter in the address (debounced), so a link or a reload keeps the view; the
  // server filters by what the address holds.
  useEffect(() => {
    const id = setTimeout(() => {
      if ((new URLSearchParams(location.search).get('q') ?? '') !== q) setParam('q', q || null);
    }, 300);
    return () => clearTimeout(id);
  }, [q]);

  // Counts per colour for the same filter. The server caches a count for up to a second
  // (API_COUNT_CACHE_MS), so one read right after a change (a retirement, then the list read
  // again) may get the count from before it: read it once more when that cache has run out.
  useEffect(() => {
    const read = () => get<FleetSummary>(summaryPath).then(setSummary, () => setSummary(null));
    void read();
    const again = setTimeout(() => void read(), 1100);
    return () => clearTimeout(again);
  }, [summaryPath, list.data]);

  useLive(
    (m) => {
      if (m.type === 'open') return void list.reload();
      const e = m.event;
      if ((lastSeq.current[e.instance_id] ?? 0) >= e.seq) return;
      lastSeq.current[e.instance_id] = e.seq;
      const known = shownIds.current.has(e.instance_id);
      list.setData((d) => {
        if (!d) return d;
        const upd = (i: Instance) => (i.id === e.instance_id ? { ...i, light: e.to, light_reason: e.reason, light_since: e.at } : i);
        return { ...d, items: d.items.map(upd), groups: d.groups?.map((g) => ({ ...g, items: g.items.map(upd) })) };
      });
      if (summary && e.from) {
        setSummary({ ...summary, lights: { ...summary.lights, [e.from]: Math.max(0, summary.lights[e.from] - 1), [e.to]: summary.lights[e.to] + 1 } });
      }
      if ((e.from === 'late' || e.from === 'red' || e.from === 'maintenance') && known) {
        // Back from late or red: a heartbeat came, and with it a new deadline (read once for a burst).
        if (reloadSoon.current) clearTimeout(reloadSoon.current);
        reloadSoon.current = setTimeout(() => void list.reload(), 1000);
      } else if (!known && list.data && list.data.total <= list.data.items.length && current.length === 1) {
        // A new instance of a fleet that fits on one page: read it again, once for a burst of
        // changes. (A paged fleet shows newcomers on the next read: every minute, or on paging.)
        if (reloadSoon.current) clearTimeout(reloadSoon.current);
        reloadSoon.current = setTimeout(() => void list.reload(), 1000);
      }
      setChanged((c) => ({ ...c, [e.instance_id]: Date.now() }));
      const name = e.machine && e.software ? `${e.machine} / ${e.software}` : e.instance_id;
      setAnnounce(t('fleet.changed', { name, from: e.from ? t(`light.${e.from}`) : '—', to: t(`light.${e.to}`) }));
    },
    [list.reload, list.setData, list.data, summary, lang, current.length],
  );
  useInterval(() => {
    if (liveState !== 'live') void list.reload();
    else tick((n) => n + 1); // refresh "x s ago"
  }, liveState === 'live' ? 15_000 : 10_000);
  useInterval(() => void list.reload(), 60_000);

  const counts: Record<Light, number> = summary?.lights ?? { red: 0, late: 0, yellow: 0, green: 0, grey: 0, maintenance: 0 };
  const total = summary?.total ?? 0;
  const items = list.data?.items ?? [];
  const groups =
    by === 'none' || !list.data?.groups
      ? [{ key: null as string | null, items, flat: true }]
      : list.data.groups.map((g) => ({ key: g.key, items: g.items, flat: false })).filter((g) => g.items.length > 0);
  const filtered = !!lightFilter || !!appliedQ;
  const first = (current.length - 1) * PAGE;
  const hasNext = !!list.data && (by === 'none' ? !!list.data.next : first + items.length < list.data.total);
  const next = () => setStarts([...current, by === 'none' ? list.data!.next! : first + PAGE]);
  const prev = () => setStarts(current.slice(0, -1));
  const pager = () =>
    list.data &&
    (current.length > 1 || hasNext) && (
    <nav class="pager" aria-label={t('fleet.pages')}>
      <button type="button" class="secondary" onClick={prev} disabled={current.length <= 1}>
        {t('fleet.prev')}
      </button>
      <span class="muted" data-testid="fleet-range">
        {t('fleet.range', { from: (first + 1).toLocaleString(lang), to: (first + items.length).toLocaleString(lang), total: list.data.total.toLocaleString(lang) })}
      </span>
      <button type="button" class="secondary" onClick={next} disabled={!hasNext}>
        {t('fleet.next')}
      </button>
    </nav>
  );

  return (
    <>
      <div class="page-head">
        <PageTitle>{t('fleet.title')}</PageTitle>
        <span class={`live-state live-${liveState}`} role="status">
          <span class="pulse" aria-hidden="true" />
          {t(`live.${liveState}`)}
        </span>
      </div>

      <div class="toolbar" role="search">
        <Field id="fleet-q" label={t('fleet.filter')} class="grow">
          <input id="fleet-q" type="search" value={q} placeholder={t('fleet.filterHint')} onInput={(e) => setQ(e.currentTarget.value)} autoComplete="off" />
        </Field>
        <Field id="fleet-by" label={t('fleet.groupBy')}>
          <select id="fleet-by" value={by} onChange={(e) => setParam('by', e.currentTarget.value === 'group' ? null : e.currentTarget.value)}>
            <option value="group">{t('fleet.byGroup')}</option>
            <option value="location">{t('fleet.byLocation')}</option>
            <option value="none">{t('fleet.byNone')}</option>
          </select>
        </Field>
      </div>

      <div class="light-filter" role="group" aria-label={t('fleet.byColour')}>
        <button type="button" class="chip" aria-pressed={lightFilter === null} onClick={() => setParam('light', null)}>
          {t('fleet.all')} <span class="count" data-count="all">{total}</span>
        </button>
        {LIGHTS.map((l) => (
          <button type="button" key={l} class={`chip chip-${l}`} aria-pressed={lightFilter === l} onClick={() => setParam('light', lightFilter === l ? null : l)}>
            <LightShape light={l} /> {t(`light.${l}`)} <span class="count" data-count={l}>{counts[l]}</span>
          </button>
        ))}
      </div>

      <p class="sr-only" aria-live="polite">
        {announce}
      </p>

      {list.error ? <ErrorNote error={list.error} onRetry={list.reload} /> : null}
      {!list.data && list.loading ? <Loading /> : null}
      {list.data && items.length === 0 && !filtered && current.length === 1 ? <EmptyFleet /> : null}
      {list.data && items.length === 0 && (filtered || current.length > 1) && <p class="note">{t('fleet.noMatch')}</p>}
      {pager()}

      {groups.map((g) => (
        <section class="group" key={g.key ?? '-'} aria-labelledby={g.flat ? undefined : `grp-${g.key ?? 'none'}`} aria-label={g.flat ? t('fleet.instances') : undefined}>
          {!g.flat && (
            <h2 class="group-title" id={`grp-${g.key ?? 'none'}`}>
              {g.key ?? (by === 'location' ? t('fleet.noLocation') : t('fleet.noGroup'))} <span class="muted">({g.items.length})</span>
            </h2>
          )}
          <table class="fleet-table cards">
            <TableHead cols={[t('fleet.col.light'), t('fleet.col.instance'), by === 'location' ? t('fleet.col.group') : t('fleet.col.location'), t('fleet.col.status'), t('fleet.col.heartbeat'), t('fleet.col.version')]} />
            <tbody>
              {g.items.map((i) => (
                <tr key={i.id} data-instance={i.id} data-light={i.light} class={changed[i.id] && Date.now() - changed[i.id]! < 5000 ? 'flash' : ''}>
                  <td data-label={t('fleet.col.light')}>
                    <LightBadge light={i.light} reason={i.light_reason} />
                  </td>
                  <td data-label={t('fleet.col.instance')}>
                    <a href={`/instances/${i.id}`} class="instance-link">
                      <strong>{i.machine}</strong> <span class="sep">/</span> {i.software}
                    </a>
                    {i.light !== 'green' && <div class="muted small">{reasonText(i.light_reason, t)}</div>}
                  </td>
                  <td data-label={by === 'location' ? t('fleet.col.group') : t('fleet.col.location')}>{(by === 'location' ? i.group : i.location) ?? <span class="muted">—</span>}</td>
                  <td data-label={t('fleet.col.status')}>
                    {i.status ? <span class={`status status-${i.status}`}>{t(statusKey(i.status))}</span> : <span class="muted">—</span>}
                    {i.status_message && <div class="muted small clamp">{i.status_message}</div>}
                  </td>
                  <td data-label={t('fleet.col.heartbeat')}>
                    {i.last_heartbeat_at ? <time dateTime={i.last_heartbeat_at} title={shortTime(i.last_heartbeat_at, lang)}>{ago(i.last_heartbeat_at, lang)}</time> : <span class="muted">{t('fleet.never')}</span>}
                    {i.light !== 'grey' && <Deadline i={i} />}
                  </td>
                  <td data-label={t('fleet.col.version')}>{i.version ?? <span class="muted">—</span>}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      ))}
      {items.length > 20 && pager()}
    </>
  );
}

/** When the row's instance turns red without a heartbeat ("red in 3 min"; the time in its tooltip). */
function Deadline({ i }: { i: Instance }) {
  const { t, lang } = useApp();
  const d = i.deadline;
  if (!d) return null;
  return (
    <div class="muted small" data-deadline={d}>
      <time dateTime={d} title={shortTime(d, lang)}>
        {t('fleet.deadline', { when: ago(d, lang) })}
      </time>
    </div>
  );
}

const STATUSES = ['running', 'degraded', 'error', 'stopped'] as const;
export function statusKey(s: string): `status.${(typeof STATUSES)[number] | 'unknown'}` {
  return (STATUSES as readonly string[]).includes(s) ? `status.${s as (typeof STATUSES)[number]}` : 'status.unknown';
}

function EmptyFleet() {
  const { t } = useApp();
  return (
    <div class="note">
      <p>{t('fleet.empty')}</p>
      <p>
        <a href="/settings#onboarding">{t('fleet.emptyLink')}</a>
      </p>
    </div>
  );
}
