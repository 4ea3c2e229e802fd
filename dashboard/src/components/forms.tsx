// Form pieces the settings and the instance page share.
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

/** A checkbox with its text after it. */
export function Check({ checked, onChange, children }: { checked: boolean; onChange: (checked: boolean) => void; children: ComponentChildren }) {
  return (
    <label class="check">
      <input type="checkbox" checked={checked} onChange={(e) => onChange(e.currentTarget.checked)} /> {children}
    </label>
  );
}

/** The options of a select: one per value, named by `label`. */
export function Options<V extends string | number>({ values, label }: { values: readonly V[]; label: (v: V) => string }) {
  return (
    <>
      {values.map((v) => (
        <option key={v} value={v}>
          {label(v)}
        </option>
      ))}
    </>
  );
}
