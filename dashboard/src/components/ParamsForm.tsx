// Arguments for an agent command. Agents advertise `params` as they like; the common shapes get a
// field each: a list of {name, label?, type?, default?, required?, options?}, a JSON-Schema-like
// {properties, required}, or a map {name: {type, ...}}. Anything else: the arguments as JSON.
import { useState } from 'preact/hooks';
import { useApp } from '../ctx.js';

interface Field {
  name: string;
  label: string;
  type: 'string' | 'number' | 'integer' | 'boolean' | 'enum';
  options?: (string | number)[];
  required: boolean;
  def?: unknown;
  hint?: string;
}

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function field(name: string, spec: Record<string, unknown>, required: boolean): Field {
  const options = Array.isArray(spec.options) ? spec.options : Array.isArray(spec.enum) ? spec.enum : undefined;
  const raw = String(spec.type ?? 'string');
  const type: Field['type'] = options ? 'enum' : raw === 'number' || raw === 'integer' || raw === 'boolean' ? raw : 'string';
  return {
    name,
    label: typeof spec.label === 'string' ? spec.label : typeof spec.title === 'string' ? spec.title : name,
    type,
    options: options as (string | number)[] | undefined,
    required: required || spec.required === true,
    def: spec.default,
    hint: typeof spec.hint === 'string' ? spec.hint : typeof spec.description === 'string' ? spec.description : undefined,
  };
}

export function fieldsOf(params: unknown): Field[] | null {
  if (Array.isArray(params) && params.every((p) => isObj(p) && typeof p.name === 'string')) {
    return (params as Record<string, unknown>[]).map((p) => field(p.name as string, p, false));
  }
  if (isObj(params) && isObj(params.properties)) {
    const req = Array.isArray(params.required) ? (params.required as string[]) : [];
    return Object.entries(params.properties).map(([k, v]) => field(k, isObj(v) ? v : {}, req.includes(k)));
  }
  if (isObj(params) && Object.values(params).every(isObj)) {
    return Object.entries(params).map(([k, v]) => field(k, v as Record<string, unknown>, false));
  }
  return null;
}

export function ParamsForm({
  params,
  busy,
  onSubmit,
  onCancel,
  submitLabel,
}: {
  params: unknown;
  busy: boolean;
  onSubmit: (args: Record<string, unknown>) => void;
  onCancel: () => void;
  submitLabel: string;
}) {
  const { t } = useApp();
  const fields = fieldsOf(params);
  const [values, setValues] = useState<Record<string, string | boolean>>(() =>
    Object.fromEntries((fields ?? []).map((f) => [f.name, f.type === 'boolean' ? f.def === true : f.def === undefined ? '' : String(f.def)])),
  );
  const [json, setJson] = useState('{}');
  const [err, setErr] = useState<string | null>(null);
  const [uid] = useState(() => Math.random().toString(36).slice(2, 8));

  const submit = (e: Event) => {
    e.preventDefault();
    setErr(null);
    if (!fields) {
      try {
        const v = JSON.parse(json) as unknown;
        if (!isObj(v)) throw new Error();
        return onSubmit(v);
      } catch {
        return setErr(t('commands.badJson'));
      }
    }
    const args: Record<string, unknown> = {};
    for (const f of fields) {
      const v = values[f.name];
      if (f.type === 'boolean') args[f.name] = v === true;
      else if (v === '' || v === undefined) continue;
      else if (f.type === 'number' || f.type === 'integer' || (f.type === 'enum' && typeof f.options?.[0] === 'number')) args[f.name] = Number(v);
      else args[f.name] = v;
    }
    onSubmit(args);
  };

  return (
    <form class="params" onSubmit={submit}>
      {fields ? (
        fields.map((f) => {
          const id = `p-${uid}-${f.name}`;
          const set = (v: string | boolean) => setValues((s) => ({ ...s, [f.name]: v }));
          return (
            <div class="field" key={f.name}>
              {f.type === 'boolean' ? (
                <label class="check">
                  <input id={id} type="checkbox" checked={values[f.name] === true} onChange={(e) => set(e.currentTarget.checked)} /> {f.label}
                </label>
              ) : (
                <>
                  <label for={id}>
                    {f.label}
                    {f.required && <span aria-hidden="true"> *</span>}
                  </label>
                  {f.type === 'enum' ? (
                    <select id={id} required={f.required} value={String(values[f.name] ?? '')} onChange={(e) => set(e.currentTarget.value)}>
                      {!f.required && <option value="">—</option>}
                      {f.options!.map((o) => (
                        <option key={String(o)} value={String(o)}>
                          {String(o)}
                        </option>
                      ))}
                    </select>
                  ) : f.type === 'string' ? (
                    <input id={id} type="text" required={f.required} value={String(values[f.name] ?? '')} onInput={(e) => set(e.currentTarget.value)} />
                  ) : (
                    <input
                      id={id}
                      type="number"
                      step={f.type === 'integer' ? 1 : 'any'}
                      required={f.required}
                      value={String(values[f.name] ?? '')}
                      onInput={(e) => set(e.currentTarget.value)}
                    />
                  )}
                </>
              )}
              {f.hint && <div class="muted small">{f.hint}</div>}
            </div>
          );
        })
      ) : (
        <div class="field">
          <label for={`p-${uid}-json`}>{t('commands.argsJson')}</label>
          <textarea id={`p-${uid}-json`} rows={3} value={json} onInput={(e) => setJson(e.currentTarget.value)} spellcheck={false} />
        </div>
      )}
      {err && (
        <p class="note error" role="alert">
          {err}
        </p>
      )}
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          {submitLabel}
        </button>
        <button type="button" onClick={onCancel}>
          {t('common.cancel')}
        </button>
      </div>
    </form>
  );
}
