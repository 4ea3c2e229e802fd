// One host metric over time (uPlot): the average per step as a line, the minimum and maximum as a
// band. The chart is a picture; the same numbers are in a table behind a disclosure for keyboard and
// screen-reader users, and the caption says the latest value and the range.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useApp } from '../ctx.js';
import { number, shortTime } from '../format.js';
import type { MetricSeries } from '../types.js';
import { Scroll } from './common.js';

/** An x-axis label in the page's language, 24-hour clock: the time, or the date at midnight and for day steps. */
function tick(seconds: number, incr: number, lang: 'de' | 'en'): string {
  const d = new Date(seconds * 1000);
  const locale = lang === 'de' ? 'de-DE' : 'en-GB';
  const midnight = d.getHours() === 0 && d.getMinutes() === 0;
  if (incr >= 86400 || midnight) return new Intl.DateTimeFormat(locale, { day: 'numeric', month: 'short' }).format(d);
  return new Intl.DateTimeFormat(locale, { hour: '2-digit', minute: '2-digit', hour12: false }).format(d);
}

export function MetricChart({ series }: { series: MetricSeries }) {
  const { t, lang } = useApp();
  const box = useRef<HTMLDivElement>(null);
  const pts = series.points;

  useEffect(() => {
    const el = box.current;
    if (!el || pts.length === 0) return;
    const xs = pts.map((p) => new Date(p.t).getTime() / 1000);
    const data: uPlot.AlignedData = [xs, pts.map((p) => p.min), pts.map((p) => p.max), pts.map((p) => p.avg)];
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height: 180,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [
        { stroke: '#3d434a', grid: { stroke: '#e4e7eb' }, ticks: { stroke: '#c9ced4' }, values: (_u, splits, _i, _space, incr) => splits.map((x) => tick(x, incr, lang)) },
        { stroke: '#3d434a', grid: { stroke: '#e4e7eb' }, ticks: { stroke: '#c9ced4' }, size: 56, values: (_u, v) => v.map((x) => number(x, lang)) },
      ],
      series: [
        {},
        { label: 'min', stroke: 'rgba(11,92,173,0.35)', width: 1 },
        { label: 'max', stroke: 'rgba(11,92,173,0.35)', width: 1 },
        { label: 'avg', stroke: '#0b5cad', width: 2, points: { show: pts.length < 40 } },
      ],
      bands: [{ series: [2, 1], fill: 'rgba(11,92,173,0.12)' }],
    };
    const plot = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(200, el.clientWidth), height: 180 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [series, lang]);

  const last = pts[pts.length - 1];
  const min = pts.length ? Math.min(...pts.map((p) => p.min)) : 0;
  const max = pts.length ? Math.max(...pts.map((p) => p.max)) : 0;
  return (
    <figure class="chart" data-metric={series.name}>
      <figcaption>
        <strong>{series.name}</strong>{' '}
        {last ? (
          <span class="muted small">
            {t('metrics.summary', { last: number(last.avg, lang), min: number(min, lang), max: number(max, lang), step: series.step_s })}
          </span>
        ) : (
          <span class="muted small">{t('metrics.noData')}</span>
        )}
      </figcaption>
      <div ref={box} class="chart-box" role="img" aria-label={t('metrics.chartLabel', { name: series.name })} />
      {pts.length > 0 && (
        <details class="chart-table">
          <summary>{t('metrics.asTable')}</summary>
          <Scroll label={t('metrics.tableLabel', { name: series.name })}>
            <table>
              <thead>
                <tr>
                  <th scope="col">{t('metrics.time')}</th>
                  <th scope="col">avg</th>
                  <th scope="col">min</th>
                  <th scope="col">max</th>
                  <th scope="col">n</th>
                </tr>
              </thead>
              <tbody>
                {pts
                  .slice(-200)
                  .reverse()
                  .map((p) => (
                    <tr key={p.t}>
                      <td>{shortTime(p.t, lang)}</td>
                      <td>{number(p.avg, lang)}</td>
                      <td>{number(p.min, lang)}</td>
                      <td>{number(p.max, lang)}</td>
                      <td>{p.count}</td>
                    </tr>
                  ))}
              </tbody>
            </table>
          </Scroll>
        </details>
      )}
    </figure>
  );
}
