// The account pages: accepting an invitation (/invitation#token=…: a new person chooses a
// password, a person with an account logs in and accepts), changing the password (/password), and
// resetting it (/reset-password: ask for a link; with #token=…: choose the new password). The
// token stays in the URL fragment, which the browser never sends to a server (nor in a Referer).
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, get, post } from '../api.js';
import { useApp } from '../ctx.js';
import { navigate, useLocation } from '../router.js';
import type { AcceptedInvitation, InvitationInfo, Me } from '../types.js';
import { ErrorNote, Loading, PageTitle } from '../components/common.js';
import { ActionForm, Field } from '../components/forms.js';
import { useTitle } from '../components/title.js';

const tokenOf = (hash: string) => new URLSearchParams(hash.replace(/^#/, '')).get('token');

/** A new password typed twice, with the rules next to it. */
function NewPassword({ id, label, value, repeat, onValue, onRepeat }: { id: string; label: string; value: string; repeat: string; onValue: (v: string) => void; onRepeat: (v: string) => void }) {
  const { t } = useApp();
  return (
    <>
      <Field id={id} label={label}>
        <input id={id} type="password" autoComplete="new-password" required value={value} aria-describedby={`${id}-rules`} onInput={(e) => onValue(e.currentTarget.value)} />
      </Field>
      <p class="muted small" id={`${id}-rules`}>
        {t('pwrules.text')}
      </p>
      <Field id={`${id}-repeat`} label={t('pwrules.repeat')}>
        <input id={`${id}-repeat`} type="password" autoComplete="new-password" required value={repeat} onInput={(e) => onRepeat(e.currentTarget.value)} />
      </Field>
    </>
  );
}

function Card({ title, children }: { title: string; children: ComponentChildren }) {
  return (
    <div class="login-wrap">
      <div class="login card">
        <PageTitle>{title}</PageTitle>
        {children}
      </div>
    </div>
  );
}

function Problem({ text }: { text: string | null }) {
  return text ? (
    <p class="note error" role="alert">
      {text}
    </p>
  ) : null;
}

export function InvitationPage() {
  const { t, me, refreshMe } = useApp();
  useTitle(t('accept.title'));
  const loc = useLocation();
  const token = tokenOf(loc.hash);
  const [info, setInfo] = useState<InvitationInfo | null>(null);
  const [invalid, setInvalid] = useState<unknown>(null);
  const [password, setPassword] = useState('');
  const [repeat, setRepeat] = useState('');
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);

  useEffect(() => {
    if (!token) return;
    post<InvitationInfo>('/auth/invitation', { token }).then(setInfo, setInvalid);
  }, [token]);

  if (!token) return <Card title={t('accept.title')}>{<Problem text={t('accept.noToken')} />}</Card>;
  if (invalid) return <Card title={t('accept.title')}>{invalid instanceof ApiError && invalid.status === 400 ? <Problem text={t('accept.invalid')} /> : <ErrorNote error={invalid} />}</Card>;
  if (!info) return <Loading />;

  const accept = async () => {
    if (!info.has_account && password !== repeat) return setProblem(t('pwrules.mismatch'));
    setBusy(true);
    setProblem(null);
    try {
      const r = await post<AcceptedInvitation>('/auth/invitation/accept', info.has_account ? { token } : { token, password });
      setPassword('');
      setRepeat('');
      await refreshMe();
      navigate(`/?joined=${encodeURIComponent(r.customer?.slug ?? '')}`, { replace: true });
    } catch (e) {
      const a = e as ApiError;
      setProblem(a.status === 400 && /invitation link/.test(a.detail) ? t('accept.invalid') : a.detail);
      setBusy(false);
    }
  };

  const what = <p>{t('accept.what', { customer: info.customer.name || info.customer.slug, role: t(`role.${info.role}`), email: info.email })}</p>;
  if (info.has_account) {
    const same = me && me.user.email.toLowerCase() === info.email.toLowerCase();
    return (
      <Card title={t('accept.title')}>
        {what}
        {!me && (
          <>
            <p>{t('accept.hasAccount')}</p>
            <a class="button primary block" href={`/login?next=${encodeURIComponent(`/invitation#token=${token}`)}`}>
              {t('accept.login')}
            </a>
          </>
        )}
        {me && !same && <Problem text={t('accept.wrongUser', { me: me.user.email, email: info.email })} />}
        {me && same && (
          <ActionForm class="stack" onSubmit={accept}>
            <Problem text={problem} />
            <button type="submit" class="primary block" disabled={busy}>
              {t('accept.accept')}
            </button>
          </ActionForm>
        )}
      </Card>
    );
  }
  return (
    <Card title={t('accept.title')}>
      {what}
      <p>{t('accept.choose')}</p>
      <ActionForm class="stack" onSubmit={accept}>
        <input type="email" name="email" autoComplete="username" value={info.email} readOnly hidden />
        <NewPassword id="accept-password" label={t('accept.password')} value={password} repeat={repeat} onValue={setPassword} onRepeat={setRepeat} />
        <Problem text={problem} />
        <button type="submit" class="primary block" disabled={busy}>
          {t('accept.create')}
        </button>
      </ActionForm>
    </Card>
  );
}

export function ChangePasswordPage() {
  const { t, me } = useApp();
  useTitle(t('pw.title'));
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [repeat, setRepeat] = useState('');
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);

  const change = async () => {
    if (next !== repeat) return setProblem(t('pwrules.mismatch'));
    setBusy(true);
    setProblem(null);
    setDone(null);
    try {
      const r = await post<{ sessions_ended: number }>('/auth/password', { current_password: current, new_password: next });
      setCurrent('');
      setNext('');
      setRepeat('');
      setDone(t('pw.done', { n: String(r.sessions_ended) }));
    } catch (e) {
      const a = e as ApiError;
      setProblem(a.status === 403 ? t('pw.wrongCurrent') : a.detail);
    } finally {
      setBusy(false);
    }
  };
  const everywhere = async () => {
    try {
      await post('/auth/logout-everywhere');
    } finally {
      location.assign('/login');
    }
  };
  return (
    <>
      <div class="page-head">
        <PageTitle>{t('pw.title')}</PageTitle>
      </div>
      <div class="card narrow">
        <ActionForm class="stack" onSubmit={change}>
          <input type="email" name="email" autoComplete="username" value={me?.user.email ?? ''} readOnly hidden />
          <Field id="pw-current" label={t('pw.current')}>
            <input id="pw-current" type="password" autoComplete="current-password" required value={current} onInput={(e) => setCurrent(e.currentTarget.value)} />
          </Field>
          <NewPassword id="pw-new" label={t('pw.new')} value={next} repeat={repeat} onValue={setNext} onRepeat={setRepeat} />
          <Problem text={problem} />
          {done && (
            <p class="note ok" role="status" id="pw-done">
              {done}
            </p>
          )}
          <button type="submit" class="primary" disabled={busy}>
            {t('pw.submit')}
          </button>
        </ActionForm>
      </div>
      <div class="card narrow">
        <h2>{t('pw.everywhere')}</h2>
        <p class="muted">{t('pw.everywhereText')}</p>
        <button type="button" class="danger" onClick={() => void everywhere()}>
          {t('pw.everywhere')}
        </button>
      </div>
    </>
  );
}

export function ResetPasswordPage() {
  const { t, lang } = useApp();
  const loc = useLocation();
  const token = tokenOf(loc.hash);
  useTitle(token ? t('reset.newTitle') : t('reset.title'));
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [repeat, setRepeat] = useState('');
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  // Another link opened in this tab: start over.
  useEffect(() => {
    setDone(null);
    setProblem(null);
  }, [token]);

  const ask = async () => {
    setBusy(true);
    setProblem(null);
    try {
      await post('/auth/password-reset', { email: email.trim(), lang });
      setDone(t('reset.sent'));
    } catch (e) {
      setProblem((e as ApiError).detail);
    } finally {
      setBusy(false);
    }
  };
  const set = async () => {
    if (password !== repeat) return setProblem(t('pwrules.mismatch'));
    setBusy(true);
    setProblem(null);
    try {
      await post('/auth/password-reset/confirm', { token, new_password: password });
      setPassword('');
      setRepeat('');
      setDone(t('reset.done'));
      // Whatever session this browser had has ended with the reset.
      await get<Me>('/auth/me').catch(() => null);
    } catch (e) {
      const a = e as ApiError;
      setProblem(a.status === 400 && /reset link/.test(a.detail) ? t('reset.invalid') : a.detail);
    } finally {
      setBusy(false);
    }
  };

  if (done) {
    return (
      <Card title={token ? t('reset.newTitle') : t('reset.title')}>
        <p class="note ok" role="status" id="reset-done">
          {done}
        </p>
        <a class="button block" href="/login">
          {t('reset.toLogin')}
        </a>
      </Card>
    );
  }
  if (token) {
    return (
      <Card title={t('reset.newTitle')}>
        <ActionForm class="stack" onSubmit={set}>
          <NewPassword id="reset-password" label={t('pw.new')} value={password} repeat={repeat} onValue={setPassword} onRepeat={setRepeat} />
          <Problem text={problem} />
          <button type="submit" class="primary block" disabled={busy}>
            {t('reset.set')}
          </button>
        </ActionForm>
      </Card>
    );
  }
  return (
    <Card title={t('reset.title')}>
      <p class="muted">{t('reset.intro')}</p>
      <ActionForm class="stack" onSubmit={ask}>
        <Field id="reset-email" label={t('login.email')}>
          <input id="reset-email" type="email" autoComplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        </Field>
        <Problem text={problem} />
        <button type="submit" class="primary block" disabled={busy}>
          {t('reset.submit')}
        </button>
      </ActionForm>
    </Card>
  );
}
