// Agent commands: the ones the agent offers (admins queue them, with a form for their parameters)
// and the recent ones with their state, polled fast while any is still open.
import { useState } from 'preact/hooks';
import { missingFeature, post, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import { shortTime } from '../../format.js';
import type { AvailableCommand, Command } from '../../types.js';
import { DataTable, ErrorNote, Listed, Loading, Section, Unavailable, useAction, useFetch, useInterval } from '../../components/common.js';
import { ParamsForm } from '../../components/ParamsForm.js';

const OPEN_STATES = ['queued', 'delivered'];

export function CommandsSection({ id, name }: { id: string; name: string }) {
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
      <Listed items={avail.data?.items} none={t('commands.noneAvailable')}>
        {(items) => (
          <ul class="cmd-list">
            {items.map((c) => (
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
      </Listed>
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
      <DataTable
        items={cmds.data?.items}
        none={t('commands.none')}
        label={t('commands.recent')}
        class="cmd-table cards"
        cols={[t('commands.command'), t('commands.state'), t('commands.created'), t('commands.finished'), t('commands.result')]}
        hidden={t('common.actions')}
        row={(c) => (
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
        )}
      />
    </Section>
  );
}
