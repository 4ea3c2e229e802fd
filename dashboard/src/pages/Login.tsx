// Log in with e-mail (or user name) and password. The server sets the HttpOnly session cookie; the
// page keeps nothing (the token in the answer is not stored anywhere).
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, post } from '../api.js';
import { useApp } from '../ctx.js';
import { navigate, useLocation } from '../router.js';
import type { Session } from '../types.js';
import { PageTitle } from '../components/common.js';
import { Field } from '../components/forms.js';
import { useTitle } from '../components/title.js';

/** Only a path of this site (no `//host`, no scheme): never an open redirect. */
export function safeNext(next: string | null): string {
  return next && /^\/(?!\/)/.test(next) && !next.startsWith('/login') ? next : '/';
}

export function LoginPage() {
  const { t, refreshMe } = useApp();
  useTitle(t('login.title'));
  const loc = useLocation();
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const emailRef = useRef<HTMLInputElement>(null);
  // The page is drawn after the session check, too late for the autofocus attribute: focus by hand.
  useEffect(() => emailRef.current?.focus(), []);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await post<Session>('/auth/login', { email: email.trim(), password });
      setPassword('');
      await refreshMe();
      navigate(safeNext(loc.search.get('next')), { replace: true });
    } catch (err) {
      const a = err as ApiError;
      setError(a.status === 401 ? t('login.wrong') : a.status === 429 ? t('login.tooMany', { detail: a.detail }) : a.detail);
      setBusy(false);
    }
  };

  return (
    <div class="login-wrap">
      <form class="login card" onSubmit={submit} aria-labelledby="page-title" noValidate={false}>
        <PageTitle>{t('login.title')}</PageTitle>
        <p class="muted">{t('login.intro')}</p>
        <Field id="login-email" label={t('login.email')}>
          <input ref={emailRef} id="login-email" name="email" type="text" inputMode="email" autoComplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        </Field>
        <Field id="login-password" label={t('login.password')}>
          <input id="login-password" name="password" type="password" autoComplete="current-password" required value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </Field>
        {error && (
          <p class="note error" role="alert" id="login-error">
            {error}
          </p>
        )}
        <button type="submit" class="primary block" disabled={busy}>
          {busy ? t('login.busy') : t('login.submit')}
        </button>
        <p class="login-links">
          <a href="/reset-password">{t('login.forgot')}</a>
        </p>
      </form>
    </div>
  );
}
