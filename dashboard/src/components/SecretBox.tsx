// A secret the server shows only once (a new API token, a webhook's signing secret, a teammate's
// first password): read-only in a monospace field with a copy button, under a warning to copy it now.
import { useApp } from '../ctx.js';
import { CopyButton } from './common.js';

export interface SecretBoxProps {
  /** The field's id (the copy button's fallback selects it); with `title`, `${id}-h` names the box. */
  id: string;
  /** The field's label, for screen readers. */
  label: string;
  value: string;
  /** The warning above the field. */
  note: string;
  /** A heading: the box becomes a region named by it. */
  title?: string;
  /** Select the whole value when the field gets the focus. */
  selectOnFocus?: boolean;
  /** Shows a "hide" button that calls this. */
  onHide?: () => void;
}

export function SecretBox({ id, label, value, note, title, selectOnFocus, onHide }: SecretBoxProps) {
  const { t } = useApp();
  const headingId = `${id}-h`;
  return (
    <div class="secret-box" role={title ? 'region' : undefined} aria-labelledby={title ? headingId : undefined}>
      {title && <h3 id={headingId}>{title}</h3>}
      <p class="note warn">{note}</p>
      <div class="row">
        <label for={id} class="sr-only">
          {label}
        </label>
        <input id={id} class="mono grow" readOnly value={value} onFocus={selectOnFocus ? (e) => e.currentTarget.select() : undefined} />
        <CopyButton text={value} targetId={id} />
      </div>
      {onHide && (
        <button type="button" class="link" onClick={onHide}>
          {t('tokens.hide')}
        </button>
      )}
    </div>
  );
}
