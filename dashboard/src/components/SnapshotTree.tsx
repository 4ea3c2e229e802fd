// The status snapshot as a tree: objects and arrays fold (native <details>, so keyboard and screen
// readers know them), typed leaves (5.10.0; resolved by the API to {value, type, unit, label, hint,
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
      <div class="snap-leaf typed" data-path={path}>
        <dt title={`${path} (${value.type})`}>
          {value.label ?? name}
          {value.label && <span class="snap-key"> {name}</span>}
        </dt>
        <dd>
          <span class="snap-value">{value.display}</span>
          {value.unit && !value.display.endsWith(value.unit) && <span class="snap-unit"> {value.unit}</span>}
          {value.hint && <div class="snap-hint">{value.hint}</div>}
        </dd>
      </div>
    );
  }
  if (isLeafy(value)) {
    const text = Array.isArray(value) ? value.map(scalar).join(', ') || '[]' : scalar(value);
    return (
      <div class="snap-leaf" data-path={path}>
        <dt title={path}>{name}</dt>
        <dd>
          <span class="snap-value">{text}</span>
        </dd>
      </div>
    );
  }
  const entries: [string, unknown][] = Array.isArray(value) ? value.map((v, i) => [`[${i}]`, v]) : Object.entries(value as Record<string, unknown>);
  return (
    <div class="snap-branch" data-path={path}>
      <details open={depth < 2}>
        <summary>
          {name} <span class="muted small">({entries.length})</span>
        </summary>
        <dl class="snap">
          {entries.map(([k, v]) => (
            <Node key={k} name={k} value={v} depth={depth + 1} path={`${path}/${k}`} />
          ))}
        </dl>
      </details>
    </div>
  );
}

export function SnapshotTree({ snapshot }: { snapshot: Record<string, unknown> | null }) {
  const { t } = useApp();
  if (!snapshot || Object.keys(snapshot).length === 0) return <p class="muted">{t('instance.noSnapshot')}</p>;
  return (
    <dl class="snap snap-root">
      {Object.entries(snapshot).map(([k, v]) => (
        <Node key={k} name={k} value={v} depth={0} path={k} />
      ))}
    </dl>
  );
}
