// The status snapshot as a tree of nested lists: objects and arrays fold (native <details>, so
// keyboard and screen readers know them), typed leaves (5.10.0; resolved by the API to {value, type, unit, label, hint,
// display}) show their label, the value with its unit, and the hint; untyped values as they are.
import { useApp } from '../ctx.js';

interface Typed {
  value: unknown;
  type: string;
  unit: string | null;
  label: string | null;
  hint: string | null;
  display: string;
}

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const isTyped = (v: unknown): v is Typed => isObj(v) && typeof v.type === 'string' && 'value' in v && typeof v.display === 'string';

function scalar(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'string') return v;
  return JSON.stringify(v);
}

function isLeafy(v: unknown): boolean {
  return !isObj(v) && !Array.isArray(v) ? true : isTyped(v) || (Array.isArray(v) && v.every((x) => !isObj(x) && !Array.isArray(x)) && v.length <= 8);
}

function Node({ name, value, depth, path }: { name: string; value: unknown; depth: number; path: string }) {
  if (isTyped(value)) {
    return (
      <li class="snap-leaf typed" data-path={path}>
        <span class="snap-k" title={`${path} (${value.type})`}>
          {value.label ?? name}
          {value.label && <span class="snap-key"> {name}</span>}
        </span>
        <span class="snap-v">
          <span class="snap-value">{value.display}</span>
          {value.unit && !value.display.endsWith(value.unit) && <span class="snap-unit"> {value.unit}</span>}
          {value.hint && <span class="snap-hint">{value.hint}</span>}
        </span>
      </li>
    );
  }
  if (isLeafy(value)) {
    const text = Array.isArray(value) ? value.map(scalar).join(', ') || '[]' : scalar(value);
    return (
      <li class="snap-leaf" data-path={path}>
        <span class="snap-k" title={path}>
          {name}
        </span>
        <span class="snap-v">
          <span class="snap-value">{text}</span>
        </span>
      </li>
    );
  }
  const entries: [string, unknown][] = Array.isArray(value) ? value.map((v, i) => [`[${i}]`, v]) : Object.entries(value as Record<string, unknown>);
  return (
    <li class="snap-branch" data-path={path}>
      <details open={depth < 2}>
        <summary>
          {name} <span class="muted small">({entries.length})</span>
        </summary>
        <ul class="snap">
          {entries.map(([k, v]) => (
            <Node key={k} name={k} value={v} depth={depth + 1} path={`${path}/${k}`} />
          ))}
        </ul>
      </details>
    </li>
  );
}

export function SnapshotTree({ snapshot }: { snapshot: Record<string, unknown> | null }) {
  const { t } = useApp();
  if (!snapshot || Object.keys(snapshot).length === 0) return <p class="muted">{t('instance.noSnapshot')}</p>;
  return (
    <ul class="snap snap-root">
      {Object.entries(snapshot).map(([k, v]) => (
        <Node key={k} name={k} value={v} depth={0} path={k} />
      ))}
    </ul>
  );
}
