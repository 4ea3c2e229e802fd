// Form pieces the pages share.
import type { ComponentChildren } from 'preact';

/** A form that runs `onSubmit` in the page instead of sending itself. */
export function ActionForm({ class: cls, onSubmit, children }: { class: string; onSubmit: () => unknown; children: ComponentChildren }) {
  return (
    <form
      class={cls}
      onSubmit={(e) => {
        e.preventDefault();
        void onSubmit();
      }}
    >
      {children}
    </form>
  );
}

/** A labelled control: its label, then the control, which must carry the same `id`. */
export function Field({ id, label, class: cls, children }: { id: string; label: ComponentChildren; class?: 'grow' | 'wide' | 'inline'; children: ComponentChildren }) {
  return (
    <div class={cls ? `field ${cls}` : 'field'}>
      <label for={id}>{label}</label>
      {children}
    </div>
  );
}

/** A checkbox with its text after it. */
export function Check({ checked, onChange, children }: { checked: boolean; onChange: (checked: boolean) => void; children: ComponentChildren }) {
  return (
    <label class="check">
      <input type="checkbox" checked={checked} onChange={(e) => onChange(e.currentTarget.checked)} /> {children}
    </label>
  );
}

/** A select of `values`, each named by `label`; `onChange` gets the chosen value as it was given. */
export function Select<V extends string | number>(props: { id: string; value: V; values: readonly V[]; label: (v: V) => string; onChange: (v: V) => void; disabled?: boolean }) {
  const { id, value, values, label, onChange, disabled } = props;
  return (
    <select id={id} value={value} disabled={disabled} onChange={(e) => onChange(values.find((v) => String(v) === e.currentTarget.value)!)}>
      {values.map((v) => (
        <option key={v} value={v}>
          {label(v)}
        </option>
      ))}
    </select>
  );
}
