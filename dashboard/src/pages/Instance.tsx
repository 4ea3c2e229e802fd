// One instance: its light and facts, the latest status with the snapshot tree, diagnostics with help
// texts (DE/EN), the colour history, the machine's host metrics, artifacts, and agent commands.
// Each part reads its own endpoint, so one that fails (or a server without that feature) does not
// take the others down.
import { Fragment } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { ApiError, missingFeature, post, qs } from '../api.js';
import { useApp } from '../ctx.js';
import { ago, bytes, dateTime, duration, shortTime } from '../format.js';
import { useLive } from '../live.js';
import { reasonText, type Lang } from '../i18n.js';
import type { Artifact, AvailableCommand, Command, Diagnostic, HelpText, InstanceDetail, InstanceStatus, LightEvent, MetricName, MetricSeries } from '../types.js';
import { ErrorNote, LightBadge, Loading, Scroll, Section, Unavailable, useAction, useFetch, useInterval, TableHead } from '../components/common.js';
import { SnapshotTree } from '../components/SnapshotTree.js';
import { MetricChart } from '../components/MetricChart.js';
import { ParamsForm } from '../components/ParamsForm.js';
import { useTitle } from '../components/title.js';
import { statusKey } from './Fleet.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function InstancePage({ id }: { id: string }) {
  const { t, lang } = useApp();
  const valid = UUID_RE.test(id);
  const inst = useFetch<InstanceDetail>(valid ? `/api/instances/${id}` : null);
  const name = inst.data ? `${inst.data.machine} / ${inst.data.software}` : t('instance.title');
  useTitle(name);

  useLive(
    (m) => {
      if (m.type === 'open') return void inst.reload();
      if (m.event.instance_id !== id) return;
      inst.setData((d) => (d ? { ...d, light: m.event.to, light_reason: m.event.reason, light_since: m.event.at } : d));
    },
    [id, inst.reload],
  );
  useInterval(() => void inst.reload(), 15_000);

  if (!valid || (inst.error instanceof ApiError && (inst.error.status === 404 || inst.error.status === 400))) {
    return (
      <>
        <h1 id="page-title" tabIndex={-1}>
          {t('instance.notFound')}
        </h1>
        <p>
          <a href="/">{t('instance.backToFleet')}</a>
        </p>
      </>
    );
  }
  if (!inst.data) return inst.error ? <ErrorNote error={inst.error} onRetry={inst.reload} /> : <Loading />;
  const i = inst.data;

  return (
    <>
      <nav aria-label={t('instance.breadcrumb')} class="crumbs">
        <a href="/">{t('nav.fleet')}</a> <span aria-hidden="true">›</span> <span>{name}</span>
      </nav>
      <div class="page-head">
        <h1 id="page-title" tabIndex={-1}>
          {i.machine} <span class="sep">/</span> {i.software}
        </h1>
        <LightBadge light={i.light} reason={i.light_reason} />
      </div>
      <p class="light-reason" data-testid="light-reason">
        {reasonText(i.light_reason, t)}
        {i.light_since && (
          <span class="muted">
            {' '}
            · {t('instance.since', { when: shortTime(i.light_since, lang) })}
          </span>
        )}
      </p>

      <dl class="facts">
        <Fact k={t('instance.status')} v={i.status ? t(statusKey(i.status)) : '—'} />
        <Fact k={t('instance.lastHeartbeat')} v={i.last_heartbeat_at ? `${ago(i.last_heartbeat_at, lang)} (${shortTime(i.last_heartbeat_at, lang)})` : t('fleet.never')} />
        <Fact k={t('instance.version')} v={i.version ?? '—'} />
        <Fact k={t('instance.uptime')} v={duration(i.uptime_seconds)} />
        <Fact k={t('instance.group')} v={i.group ?? '—'} />
        <Fact k={t('instance.location')} v={i.location ?? '—'} />
        <Fact k={t('instance.priorities')} v={`${i.group_priority ?? '—'} / ${i.sort_priority ?? '—'}`} />
        <Fact k={t('instance.ips')} v={i.ip_addresses.length ? i.ip_addresses.join(', ') : '—'} />
        <Fact k={t('instance.pid')} v={i.pid === null ? '—' : String(i.pid)} />
        <Fact k={t('instance.firstSeen')} v={dateTime(i.first_seen_at, lang)} />
      </dl>

      <nav class="jump" aria-label={t('instance.sections')}>
        <a href="#status">{t('instance.status')}</a>
        <a href="#diagnostics">{t('diag.title')}</a>
        <a href="#history">{t('history.title')}</a>
        <a href="#metrics">{t('metrics.title')}</a>
        <a href="#artifacts">{t('artifacts.title')}</a>
        <a href="#commands">{t('commands.title')}</a>
      </nav>

      <StatusSection id={id} />
      <DiagnosticsSection id={id} />
      <HistorySection id={id} />
      <MetricsSection machineId={i.machine_id} machine={i.machine} />
      <ArtifactsSection machineId={i.machine_id} software={i.software} />
      <CommandsSection id={id} name={name} />
    </>
  );
}

function Fact({ k, v }: { k: string; v: string }) {
  return (
    <div>
      <dt>{k}</dt>
      <dd>{v}</dd>
    </div>
  );
}

function StatusSection({ id }: { id: string }) {
  const { t, lang } = useApp();
  const st = useFetch<InstanceStatus>(`/api/instances/${id}/status`);
  useInterval(() => void st.reload(), 30_000);
  return (
    <Section id="status" title={t('instance.status')}>
      {st.error ? <ErrorNote error={st.error} onRetry={st.reload} /> : null}
      {!st.data ? (
        st.error ? null : <Loading />
      ) : st.data.status === null ? (
        <p class="muted">{t('instance.noStatus')}</p>
      ) : (
        <>
          <p>
            <span class={`status status-${st.data.status}`}>{t(statusKey(st.data.status))}</span>
            {st.data.message && <span> — {st.data.message}</span>}
            <span class="muted small"> · {dateTime(st.data.status_at, lang)}</span>
          </p>
          <h3>{t('instance.snapshot')}</h3>
          <SnapshotTree snapshot={st.data.snapshot} />
        </>
      )}
    </Section>
  );
}

const SEVERITIES = [0, 1, 2] as const;

function Severity({ s }: { s: number }) {
  const { t } = useApp();
  const k = s >= 2 ? 'error' : s === 1 ? 'warning' : 'info';
  return (
    <span class={`sev sev-${k}`}>
      <span aria-hidden="true">{s >= 2 ? '■' : s === 1 ? '▲' : '●'}</span> {t(`severity.${k}`)}
    </span>
  );
}

function DiagnosticsSection({ id }: { id: string }) {
  const { t, lang } = useApp();
  const [minSev, setMinSev] = useState(0);
  const [suppressed, setSuppressed] = useState(false);
  const [open, setOpen] = useState<string | null>(null);
  const path = `/api/instances/${id}/diagnostics${qs({ severity: minSev || null, suppressed: suppressed ? 'include' : null, limit: 200 })}`;
  const diags = useFetch<{ items: Diagnostic[] }>(path);
  useInterval(() => void diags.reload(), 30_000);
  const key = (d: Diagnostic) => `${d.report_id}:${d.item}`;
  return (
    <Section
      id="diagnostics"
      title={t('diag.title')}
      actions={
        <>
          <div class="field inline">
            <label for="diag-sev">{t('diag.minSeverity')}</label>
            <select id="diag-sev" value={minSev} onChange={(e) => setMinSev(Number(e.currentTarget.value))}>
              {SEVERITIES.map((s) => (
                <option key={s} value={s}>
                  {t(`severity.${s >= 2 ? 'error' : s === 1 ? 'warning' : 'info'}`)}
                </option>
              ))}
            </select>
          </div>
          <label class="check">
            <input type="checkbox" checked={suppressed} onChange={(e) => setSuppressed(e.currentTarget.checked)} /> {t('diag.showSuppressed')}
          </label>
        </>
      }
    >
      {diags.error ? <ErrorNote error={diags.error} onRetry={diags.reload} /> : null}
      {!diags.data && !diags.error ? <Loading /> : null}
      {diags.data && diags.data.items.length === 0 && <p class="muted">{suppressed ? t('diag.none') : t('diag.noneUnsuppressed')}</p>}
      {diags.data && diags.data.items.length > 0 && (
        <Scroll label={t('diag.title')}>
          <table class="diag-table cards">
            <TableHead cols={[t('diag.time'), t('diag.severity'), t('diag.code'), t('diag.message')]} hidden={t('diag.help')} />
            <tbody>
              {diags.data.items.map((d) => {
                const k = key(d);
                const isOpen = open === k;
                return (
                  <Fragment key={k}>
                    <tr class={d.suppressed ? 'suppressed' : ''} data-code={d.code}>
                      <td data-label={t('diag.time')}>
                        <time dateTime={d.received_at}>{shortTime(d.received_at, lang)}</time>
                      </td>
                      <td data-label={t('diag.severity')}>
                        <Severity s={d.severity} />
                      </td>
                      <td data-label={t('diag.code')}>
                        <code>{d.code}</code>
                      </td>
                      <td data-label={t('diag.message')}>
                        {d.message || <span class="muted">—</span>}
                        {d.suppressed && <span class="tag">{t('diag.suppressed')}</span>}
                      </td>
                      <td>
                        <button type="button" class="small" aria-expanded={isOpen} aria-controls={`help-${k}`} onClick={() => setOpen(isOpen ? null : k)}>
                          {isOpen ? t('diag.hideHelp') : t('diag.help')}
                          <span class="sr-only"> {d.code}</span>
                        </button>
                      </td>
                    </tr>
                    {isOpen && (
                      <tr class="help-row">
                        <td colSpan={5} id={`help-${k}`}>
                          <HelpPanel id={id} code={d.code} />
                        </td>
                      </tr>
                    )}
                  </Fragment>
                );
              })}
            </tbody>
          </table>
        </Scroll>
      )}
    </Section>
  );
}

/** The help text of a code in the chosen language (the UI's, switchable here too). */
function HelpPanel({ id, code }: { id: string; code: number }) {
  const { t, lang } = useApp();
  const [helpLang, setHelpLang] = useState<Lang>(lang);
  useEffect(() => setHelpLang(lang), [lang]);
  const help = useFetch<HelpText>(`/api/instances/${id}/help${qs({ code, lang: helpLang })}`);
  const available = help.error instanceof ApiError && help.error.status === 404 ? ((help.error.body as { available?: string[] })?.available ?? []) : null;
  return (
    <div class="help" data-help-code={code} lang={helpLang}>
      <div class="help-head">
        <span class="muted small">{t('diag.helpFor', { code })}</span>
        <div role="group" aria-label={t('diag.helpLanguage')} class="seg">
          {(['de', 'en'] as const).map((l) => (
            <button key={l} type="button" class="small" aria-pressed={helpLang === l} onClick={() => setHelpLang(l)} lang={l}>
              {l.toUpperCase()}
            </button>
          ))}
        </div>
      </div>
      {help.loading && !help.data ? <Loading /> : null}
      {available !== null ? (
        <p class="muted" role="status">
          {t('diag.noHelp', { lang: t(`lang.${helpLang}`) })}
          {available.length > 0 && (
            <>
              {' '}
              {available.map((l) => (
                <button key={l} type="button" class="link" onClick={() => setHelpLang(l as Lang)}>
                  {t('diag.showIn', { lang: t(`lang.${l as Lang}`) })}
                </button>
              ))}
            </>
          )}
        </p>
      ) : help.error ? (
        <ErrorNote error={help.error} />
      ) : help.data && help.data.lang === helpLang ? (
        <article class="help-text">
          {help.data.title && <h3>{help.data.title}</h3>}
          <p class="pre">{help.data.text}</p>
        </article>
      ) : null}
    </div>
  );
}

const CAUSES = ['report', 'expiry', 'sweep'] as const;
type Cause = (typeof CAUSES)[number];

function HistorySection({ id }: { id: string }) {
  const { t, lang } = useApp();
  const ev = useFetch<{ items: LightEvent[] }>(`/api/instances/${id}/events${qs({ limit: 100 })}`);
  useLive(
    (m) => {
      if (m.type === 'open') return void ev.reload();
      if (m.event.instance_id !== id) return;
      ev.setData((d) => (d && !d.items.some((x) => x.id === m.event.id) ? { items: [m.event, ...d.items] } : d));
    },
    [id, ev.reload],
  );
  return (
    <Section id="history" title={t('history.title')}>
      {missingFeature(ev.error) ? <Unavailable /> : ev.error ? <ErrorNote error={ev.error} onRetry={ev.reload} /> : null}
      {!ev.data && !ev.error ? <Loading /> : null}
      {ev.data && ev.data.items.length === 0 && <p class="muted">{t('history.none')}</p>}
      {ev.data && ev.data.items.length > 0 && (
        <ol class="timeline">
          {ev.data.items.map((e) => (
            <li key={e.id} data-event={e.id}>
              <time dateTime={e.at}>{dateTime(e.at, lang)}</time>
              <span class="change">
                {e.from ? <LightBadge light={e.from} compact /> : <span class="muted">—</span>} <span aria-label={t('history.to')}>→</span> <LightBadge light={e.to} compact />
              </span>
              <span class="reason">{reasonText(e.reason, t)}</span>
              {e.cause && <span class="muted small">{CAUSES.includes(e.cause as Cause) ? t(`history.cause.${e.cause as Cause}`) : e.cause}</span>}
            </li>
          ))}
        </ol>
      )}
    </Section>
  );
}

const RANGES = { '1h': 3600, '6h': 6 * 3600, '24h': 86400, '7d': 7 * 86400 } as const;
type Range = keyof typeof RANGES;

function MetricsSection({ machineId, machine }: { machineId: string; machine: string }) {
  const { t } = useApp();
  const [range, setRange] = useState<Range>('24h');
  const [now, setNow] = useState(() => Date.now());
  useInterval(() => setNow(Date.now()), 60_000);
  const from = new Date(now - RANGES[range] * 1000).toISOString();
  const to = new Date(now + 60_000).toISOString();
  const names = useFetch<{ names: MetricName[] }>(`/api/machines/${machineId}/metrics${qs({ from, to })}`);
  const [picked, setPicked] = useState<string[] | null>(null);
  const all = useMemo(() => (names.data?.names ?? []).map((n) => n.name).sort(), [names.data]);
  const shown = picked ?? all.slice(0, 4);
  return (
    <Section
      id="metrics"
      title={t('metrics.title')}
      actions={
        <div class="field inline">
          <label for="metrics-range">{t('metrics.range')}</label>
          <select id="metrics-range" value={range} onChange={(e) => setRange(e.currentTarget.value as Range)}>
            {(Object.keys(RANGES) as Range[]).map((r) => (
              <option key={r} value={r}>
                {t(`metrics.range.${r}`)}
              </option>
            ))}
          </select>
        </div>
      }
    >
      <p class="muted small">{t('metrics.ofMachine', { machine })}</p>
      {missingFeature(names.error) ? <Unavailable /> : names.error ? <ErrorNote error={names.error} onRetry={names.reload} /> : null}
      {!names.data && !names.error ? <Loading /> : null}
      {names.data && all.length === 0 && <p class="muted">{t('metrics.none')}</p>}
      {all.length > 0 && (
        <fieldset class="metric-pick">
          <legend>{t('metrics.pick')}</legend>
          {all.map((n) => (
            <label key={n} class="check">
              <input
                type="checkbox"
                checked={shown.includes(n)}
                onChange={(e) => setPicked(e.currentTarget.checked ? [...shown, n] : shown.filter((x) => x !== n))}
              />{' '}
              {n}
            </label>
          ))}
        </fieldset>
      )}
      <div class="charts">
        {shown
          .filter((n) => all.includes(n))
          .map((n) => (
            <SeriesChart key={`${n}-${range}`} machineId={machineId} name={n} from={from} to={to} />
          ))}
      </div>
    </Section>
  );
}

function SeriesChart({ machineId, name, from, to }: { machineId: string; name: string; from: string; to: string }) {
  const s = useFetch<MetricSeries>(`/api/machines/${machineId}/metrics${qs({ name, from, to })}`);
  if (s.error) return <ErrorNote error={s.error} onRetry={s.reload} />;
  if (!s.data) return <Loading />;
  return <MetricChart series={s.data} />;
}

function ArtifactsSection({ machineId, software }: { machineId: string; software: string }) {
  const { t, lang } = useApp();
  const [all, setAll] = useState(false);
  const arts = useFetch<{ items: Artifact[]; total: number }>(`/api/machines/${machineId}/artifacts${qs({ software: all ? null : software, limit: 100 })}`);
  useInterval(() => void arts.reload(), 60_000);
  return (
    <Section
      id="artifacts"
      title={t('artifacts.title')}
      actions={
        <label class="check">
          <input type="checkbox" checked={all} onChange={(e) => setAll(e.currentTarget.checked)} /> {t('artifacts.allSoftware')}
        </label>
      }
    >
      {missingFeature(arts.error) ? <Unavailable /> : arts.error ? <ErrorNote error={arts.error} onRetry={arts.reload} /> : null}
      {!arts.data && !arts.error ? <Loading /> : null}
      {arts.data && arts.data.items.length === 0 && <p class="muted">{t('artifacts.none')}</p>}
      {arts.data && arts.data.items.length > 0 && (
        <Scroll label={t('artifacts.title')}>
          <table class="cards">
            <TableHead cols={[t('artifacts.file'), t('artifacts.size'), t('artifacts.software'), t('artifacts.uploaded'), 'SHA-256']} />
            <tbody>
              {arts.data.items.map((a) => (
                <tr key={a.id}>
                  <td data-label={t('artifacts.file')}>
                    <a href={a.download} download={a.filename}>
                      {a.filename}
                    </a>
                  </td>
                  <td data-label={t('artifacts.size')}>{bytes(a.size, lang)}</td>
                  <td data-label={t('artifacts.software')}>{a.software}</td>
                  <td data-label={t('artifacts.uploaded')}>{dateTime(a.uploaded_at, lang)}</td>
                  <td data-label="SHA-256">{a.sha256 ? <code title={a.sha256}>{a.sha256.slice(0, 12)}…</code> : <span class="muted">—</span>}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {arts.data.total > arts.data.items.length && <p class="muted small">{t('artifacts.more', { shown: arts.data.items.length, total: arts.data.total })}</p>}
        </Scroll>
      )}
    </Section>
  );
}

const OPEN_STATES = ['queued', 'delivered'];

function CommandsSection({ id, name }: { id: string; name: string }) {
  const { t, lang, canAdmin } = useApp();
  const avail = useFetch<{ items: AvailableCommand[] }>(`/api/instances/${id}/commands/available`);
  const cmds = useFetch<{ items: Command[] }>(`/api/instances/${id}/commands${qs({ limit: 50 })}`);
  const [form, setForm] = useState<string | null>(null);
  const [queued, setQueued] = useState<string | null>(null);
  const anyOpen = (cmds.data?.items ?? []).some((c) => OPEN_STATES.includes(c.state));
  useInterval(() => void cmds.reload(), anyOpen ? 2000 : 15_000);
  useInterval(() => void avail.reload(), 30_000);
  const queue = useAction(async (c: AvailableCommand, args: Record<string, unknown>) => {
    if (!confirm(t('commands.confirm', { name: c.label ?? c.name, instance: name }))) return;
    await post<Command>(`/api/instances/${id}/commands`, { module: c.module, command: c.name, args });
    setQueued(c.label ?? c.name);
    setForm(null);
    await cmds.reload();
  });
  const cancel = useAction(async (c: Command) => {
    await post<Command>(`/api/commands/${c.id}/cancel`);
    await cmds.reload();
  });
  if (missingFeature(avail.error) || missingFeature(cmds.error)) {
    return (
      <Section id="commands" title={t('commands.title')}>
        <Unavailable />
      </Section>
    );
  }
  const ck = (c: AvailableCommand) => `${c.module}.${c.name}`;
  return (
    <Section id="commands" title={t('commands.title')}>
      <h3>{t('commands.available')}</h3>
      {avail.error ? <ErrorNote error={avail.error} onRetry={avail.reload} /> : null}
      {!avail.data && !avail.error ? <Loading /> : null}
      {avail.data && avail.data.items.length === 0 && <p class="muted">{t('commands.noneAvailable')}</p>}
      {avail.data && avail.data.items.length > 0 && (
        <ul class="cmd-list">
          {avail.data.items.map((c) => (
            <li key={ck(c)} data-command={ck(c)}>
              <div>
                <strong>{c.label ?? c.name}</strong> <span class="muted small">{c.module}.{c.name}</span>
              </div>
              {canAdmin ? (
                form === ck(c) ? (
                  <ParamsForm params={c.params} busy={queue.busy} onCancel={() => setForm(null)} onSubmit={(args) => void queue.run(c, args)} submitLabel={t('commands.queue')} />
                ) : (
                  <button type="button" onClick={() => (c.params == null ? void queue.run(c, {}) : setForm(ck(c)))} disabled={queue.busy} aria-label={t('commands.runLabel', { name: c.label ?? c.name })}>
                    {t('commands.run')}
                  </button>
                )
              ) : null}
            </li>
          ))}
        </ul>
      )}
      {!canAdmin && avail.data && avail.data.items.length > 0 && <p class="muted small">{t('commands.needsAdmin')}</p>}
      {queue.error ? <ErrorNote error={queue.error} /> : null}
      {queued && !queue.error && (
        <p class="note ok" role="status">
          {t('commands.queued', { name: queued })}
        </p>
      )}

      <h3>{t('commands.recent')}</h3>
      {cmds.error ? <ErrorNote error={cmds.error} onRetry={cmds.reload} /> : null}
      {cancel.error ? <ErrorNote error={cancel.error} /> : null}
      {cmds.data && cmds.data.items.length === 0 && <p class="muted">{t('commands.none')}</p>}
      {cmds.data && cmds.data.items.length > 0 && (
        <Scroll label={t('commands.recent')}>
          <table class="cmd-table cards">
            <TableHead cols={[t('commands.command'), t('commands.state'), t('commands.created'), t('commands.finished'), t('commands.result')]} hidden={t('common.actions')} />
            <tbody>
              {cmds.data.items.map((c) => (
                <tr key={c.id} data-command-id={c.id} data-state={c.state}>
                  <td data-label={t('commands.command')}>
                    <code>
                      {c.module}.{c.command}
                    </code>
                    {Object.keys(c.args ?? {}).length > 0 && <div class="muted small">{JSON.stringify(c.args)}</div>}
                  </td>
                  <td data-label={t('commands.state')}>
                    <span class={`state state-${c.state}`}>{t(`commands.st.${c.state}`)}</span>
                  </td>
                  <td data-label={t('commands.created')}>{shortTime(c.created_at, lang)}</td>
                  <td data-label={t('commands.finished')}>{c.finished_at ? shortTime(c.finished_at, lang) : '—'}</td>
                  <td data-label={t('commands.result')}>{c.result_message ?? (c.result_output != null ? <code>{JSON.stringify(c.result_output).slice(0, 200)}</code> : '—')}</td>
                  <td>
                    {canAdmin && c.state === 'queued' && (
                      <button type="button" class="small" disabled={cancel.busy} onClick={() => void cancel.run(c)}>
                        {t('commands.cancel')}
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
    </Section>
  );
}
