// Dead letters (system administrators): reports the workers could not store, from every customer.
// Filter by customer, time and reason; open one (its headers and reports, bodies pretty-printed
// and bounded by the server); replay one, or every one that matches, after a confirmation (for
// many, a dry run first says how many). GET/POST /api/admin/dead-letters (lib/store/dead-letters.ts).
import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { post, qs } from '../api.js';
import { useApp } from '../ctx.js';
import { dateTime } from '../format.js';
import type { DeadLetter, DeadLetterDetail, DeadLetterList, ReplayAnswer } from '../types.js';
import { DataTable, ErrorNote, Loading, PageTitle, Section, useAction, useFetch } from '../components/common.js';
import { ActionForm, Field } from '../components/forms.js';
import { useTitle } from '../components/title.js';

interface Filter {
  customer: string;
  since: string;
  reason: string;
}

const PAGE = 50;

/** The filter as the API takes it (empty fields left out). */
const selection = (f: Filter) => ({ customer: f.customer.trim() || undefined, since: f.since.trim() || undefined, reason: f.reason.trim() || undefined });

export function DeadLettersPage() {
  const { t, lang } = useApp();
  useTitle(t('dl.title'));
  const [form, setForm] = useState<Filter>({ customer: '', since: '', reason: '' });
  const [applied, setApplied] = useState<Filter>(form);
  const [after, setAfter] = useState<number | null>(null);
  const list = useFetch<DeadLetterList>(`/api/admin/dead-letters${qs({ ...selection(applied), after_seq: after, limit: PAGE })}`);
  const [open, setOpen] = useState<number | null>(null);
  const [result, setResult] = useState<ReplayAnswer | null>(null);

  const replay = useAction(async (seq?: DeadLetter) => {
    setResult(null);
    const sel = seq ? { seqs: [seq.seq] } : { ...selection(applied), all: true };
    if (seq) {
      if (!confirm(t('dl.confirmOne', { seq: seq.seq, customer: seq.customer ?? t('dl.noCustomer') }))) return;
    } else {
      // A dry run first: the confirmation names how many would be replayed and skipped.
      const dry = await post<ReplayAnswer>('/api/admin/dead-letter-replays', { ...sel, dry_run: true });
      if (dry.summary.selected === 0) return setResult(dry);
      if (!confirm(t('dl.confirmAll', { n: dry.summary.would_replay, skip: dry.summary.skipped }))) return;
    }
    setResult(await post<ReplayAnswer>('/api/admin/dead-letter-replays', sel));
    setOpen(null);
    await list.reload();
  });

  const items = list.data?.items;
  return (
    <>
      <div class="page-head">
        <PageTitle>{t('dl.title')}</PageTitle>
      </div>
      <p class="muted">{t('dl.intro')}</p>
      <Section id="dead-letters" title={t('dl.title')}>
        <ActionForm
          class="inline-form"
          onSubmit={() => {
            setAfter(null);
            setOpen(null);
            setApplied({ ...form });
          }}
        >
          <Field id="dl-customer" label={t('dl.customer')} class="grow">
            <input id="dl-customer" value={form.customer} maxLength={64} placeholder={t('dl.customerHint')} onInput={(e) => setForm({ ...form, customer: e.currentTarget.value })} />
          </Field>
          <Field id="dl-since" label={t('dl.since')} class="grow">
            <input id="dl-since" value={form.since} maxLength={64} placeholder={t('dl.sinceHint')} onInput={(e) => setForm({ ...form, since: e.currentTarget.value })} />
          </Field>
          <Field id="dl-reason" label={t('dl.reason')} class="grow">
            <input id="dl-reason" value={form.reason} maxLength={200} onInput={(e) => setForm({ ...form, reason: e.currentTarget.value })} />
          </Field>
          <button type="submit" class="primary">
            {t('dl.apply')}
          </button>
        </ActionForm>
        {list.error ? <ErrorNote error={list.error} onRetry={list.reload} /> : null}
        {replay.error ? <ErrorNote error={replay.error} /> : null}
        {result && <ReplayNote r={result} />}
        {!items && !list.error && <Loading />}
        <DataTable
          items={items}
          none={t('dl.none')}
          label={t('dl.title')}
          class="dl-table cards"
          cols={[t('dl.seq'), t('dl.at'), t('dl.customer'), t('dl.kind'), t('dl.instance'), t('dl.failure'), t('dl.error')]}
          hidden={t('common.actions')}
          row={(d) => (
            <Fragment key={d.seq}>
              <tr data-dead-letter={d.seq} data-content={d.content}>
                <td data-label={t('dl.seq')}>{d.seq}</td>
                <td data-label={t('dl.at')}>{dateTime(d.dead_lettered_at, lang)}</td>
                <td data-label={t('dl.customer')}>{d.customer ?? <span class="muted">{t('dl.noCustomer')}</span>}</td>
                <td data-label={t('dl.kind')}>{d.content === 'undecodable' ? <span class="muted">{t('dl.undecodable')}</span> : d.kind ?? '—'}</td>
                <td data-label={t('dl.instance')}>{d.machine || d.software ? `${d.machine ?? '—'} / ${d.software ?? '—'}` : '—'}</td>
                <td data-label={t('dl.failure')}>{d.failure ?? '—'}</td>
                <td data-label={t('dl.error')} class="wrap-anywhere">
                  {d.error ?? '—'}
                </td>
                <td>
                  <div class="row">
                    <button type="button" class="small" aria-expanded={open === d.seq} onClick={() => setOpen(open === d.seq ? null : d.seq)}>
                      {open === d.seq ? t('dl.hide') : t('dl.show')}
                      <span class="sr-only"> {d.seq}</span>
                    </button>
                    {d.content !== 'undecodable' && (
                      <button type="button" class="small" disabled={replay.busy} onClick={() => void replay.run(d)}>
                        {t('dl.replay')}
                        <span class="sr-only"> {d.seq}</span>
                      </button>
                    )}
                  </div>
                </td>
              </tr>
              {open === d.seq && (
                <tr class="dl-detail-row">
                  <td colSpan={8}>
                    <Detail seq={d.seq} />
                  </td>
                </tr>
              )}
            </Fragment>
          )}
        />
        <div class="pager">
          {items && items.length > 0 && (
            <button type="button" class="danger" disabled={replay.busy} onClick={() => void replay.run()}>
              {t('dl.replayAll')}
            </button>
          )}
          {after !== null && (
            <button type="button" onClick={() => setAfter(null)}>
              {t('dl.first')}
            </button>
          )}
          {list.data?.next_seq != null && (
            <>
              <button type="button" onClick={() => setAfter(list.data!.next_seq)}>
                {t('dl.next')}
              </button>
              <span class="muted small">{t('dl.examined', { n: list.data.scanned })}</span>
            </>
          )}
        </div>
      </Section>
    </>
  );
}

function ReplayNote({ r }: { r: ReplayAnswer }) {
  const { t } = useApp();
  const s = r.summary;
  if (s.selected === 0) return <div class="note" role="status">{t('dl.nothing')}</div>;
  return (
    <div class={`note ${s.failed > 0 ? 'error' : 'ok'}`} role="status" id="dl-result">
      <p>
        {t('dl.result', { replayed: s.replayed, skipped: s.skipped, failed: s.failed, gone: s.gone })}
        {r.next_seq !== null && ` ${t('dl.resultMore')}`}
      </p>
      <ul class="small">
        {r.items.slice(0, 20).map((i) => (
          <li key={i.seq} data-replayed={i.seq} data-result={i.result}>
            {i.seq} · {i.customer ?? t('dl.noCustomer')} · {i.kind ?? '—'} · {t(`dl.res.${i.result}`)}: {i.detail}
          </li>
        ))}
      </ul>
    </div>
  );
}

function Detail({ seq }: { seq: number }) {
  const { t, lang } = useApp();
  const d = useFetch<DeadLetterDetail>(`/api/admin/dead-letters/${seq}`);
  if (d.error) return <ErrorNote error={d.error} onRetry={d.reload} />;
  if (!d.data) return <Loading />;
  const x = d.data;
  return (
    <div class="dl-detail" data-detail={seq}>
      <h3>{t('dl.headers')}</h3>
      <dl class="dl-headers small">
        {Object.entries(x.headers).map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd class="wrap-anywhere">{v}</dd>
          </div>
        ))}
      </dl>
      {x.reports.map((r, i) => (
        <div key={i} class="dl-report">
          <h3>{t('dl.report', { i: i + 1, n: x.dead_letter.reports })}</h3>
          <p class="small">
            <code>{r.id}</code> · {r.kind} · {r.customer}/{r.machine}/{r.software} · {t('dl.received', { when: dateTime(r.received_at, lang) })}
          </p>
          <p class="small muted">
            {t('dl.body', { bytes: r.body.bytes })}
            {r.body.truncated && ` · ${t('dl.shortened')}`}
          </p>
          <pre class="dl-body" role="region" tabIndex={0} aria-label={t('dl.body', { bytes: r.body.bytes })}>
            {r.body.text}
          </pre>
        </div>
      ))}
      {x.dead_letter.reports > x.reports.length && <p class="muted small">{t('dl.moreReports', { n: x.dead_letter.reports - x.reports.length })}</p>}
      {x.raw && (
        <div class="dl-report">
          <p class="small muted">
            {t('dl.content', { format: x.raw.format, bytes: x.raw.bytes })}
            {x.raw.truncated && ` · ${t('dl.shortened')}`}
          </p>
          <pre class="dl-body" role="region" tabIndex={0} aria-label={t('dl.content', { format: x.raw.format, bytes: x.raw.bytes })}>
            {x.raw.text}
          </pre>
        </div>
      )}
    </div>
  );
}
