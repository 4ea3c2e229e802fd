// The machine's host metrics over a chosen range: pick the series, one chart each.
import { useMemo, useState } from 'preact/hooks';
import { missingFeature, qs } from '../../api.js';
import { useApp } from '../../ctx.js';
import type { MetricName, MetricSeries } from '../../types.js';
import { ErrorNote, Loading, Section, Unavailable, useFetch, useInterval } from '../../components/common.js';
import { Check, Field, Select } from '../../components/forms.js';
import { MetricChart } from '../../components/MetricChart.js';

const RANGES = { '1h': 3600, '6h': 6 * 3600, '24h': 86400, '7d': 7 * 86400 } as const;
type Range = keyof typeof RANGES;

export function MetricsSection({ machineId, machine }: { machineId: string; machine: string }) {
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
        <Field id="metrics-range" label={t('metrics.range')} class="inline">
          <Select id="metrics-range" value={range} values={Object.keys(RANGES) as Range[]} label={(r) => t(`metrics.range.${r}`)} onChange={setRange} />
        </Field>
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
            <Check key={n} checked={shown.includes(n)} onChange={(on) => setPicked(on ? [...shown, n] : shown.filter((x) => x !== n))}>
              {n}
            </Check>
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
