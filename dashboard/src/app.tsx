// The shell: who is logged in (GET /auth/me), the header (navigation, customer switcher, language,
// logout), the live feed, and the page for the current path.
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, get, post, setUnauthorizedHandler } from './api.js';
import { AppCtx, ROLE_RANK, useApp, type AppState } from './ctx.js';
import { initialLang, saveLang, translator, type Lang } from './i18n.js';
import { live, useLiveState } from './live.js';
import { match, navigate, useLocation } from './router.js';
import type { Me, MyCustomers } from './types.js';
import { LoginPage, safeNext } from './pages/Login.js';
import { FleetPage } from './pages/Fleet.js';
import { InstancePage } from './pages/Instance.js';
import { SettingsPage } from './pages/Settings.js';
import { DeadLettersPage } from './pages/DeadLetters.js';
import { MaintenancePage } from './pages/Maintenance.js';
import { ChangePasswordPage, InvitationPage, ResetPasswordPage } from './pages/Account.js';
import { ErrorNote, Loading, NotFoundNote, PageTitle } from './components/common.js';
import { useTitle } from './components/title.js';

export function App() {
  const loc = useLocation();
  const route = match(loc.path);
  const [lang, setLangState] = useState<Lang>(initialLang);
  const t = useMemo(() => translator(lang), [lang]);
  // undefined: not known yet; null: not logged in.
  const [me, setMe] = useState<Me | null | undefined>(undefined);
  const [bootError, setBootError] = useState<unknown>(null);

  const refreshMe = useCallback(async () => {
    try {
      setMe(await get<Me>('/auth/me'));
      setBootError(null);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) setMe(null);
      else setBootError(e);
    }
  }, []);

  useEffect(() => {
    setUnauthorizedHandler(() => setMe(null));
    void refreshMe();
  }, [refreshMe]);

  useEffect(() => {
    document.documentElement.lang = lang;
    saveLang(lang);
  }, [lang]);

  // Logged out (or the session ended): to the login page, and back here afterwards. The invitation
  // and password-reset pages are for people not logged in too.
  useEffect(() => {
    if (me === null && route.name !== 'login' && route.name !== 'invitation' && route.name !== 'resetpassword') navigate(`/login?next=${encodeURIComponent(loc.path + location.search + location.hash)}`, { replace: true });
    if (me && route.name === 'login') navigate(safeNext(loc.search.get('next')), { replace: true });
  }, [me, route.name]);

  // One live stream per active customer.
  const activeId = me?.active_customer?.id ?? null;
  useEffect(() => {
    if (!activeId) return live.stop();
    live.start();
    return () => live.stop();
  }, [activeId]);

  // Move focus to the new page's heading, so keyboard and screen-reader users start there.
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    if (match(loc.path).name === 'login') return; // the login page focuses its first field
    // The heading may come only with the page's data: look for it for a few seconds.
    let tries = 0;
    const id = setInterval(() => {
      const h = document.getElementById('page-title');
      if (h || ++tries > 60) clearInterval(id);
      h?.focus();
    }, 50);
    return () => clearInterval(id);
  }, [loc.path]);

  const role = me?.active_customer?.role ?? null;
  const state: AppState = {
    me: me ?? null,
    role,
    lang,
    setLang: setLangState,
    t,
    refreshMe,
    canAdmin: role !== null && ROLE_RANK[role] >= ROLE_RANK.admin,
  };

  let page;
  if (bootError && me === undefined) page = <ErrorNote error={bootError} onRetry={refreshMe} />;
  else if (route.name === 'login') page = me === null ? <LoginPage /> : <Loading />;
  else if (route.name === 'invitation') page = me === undefined ? <Loading /> : <InvitationPage />;
  else if (route.name === 'resetpassword') page = <ResetPasswordPage />;
  else if (!me) page = <Loading />;
  else if (route.name === 'password') page = <ChangePasswordPage />;
  // Dead letters are every customer's: a system administrator needs no active customer for them.
  else if (route.name === 'deadletters') page = me.is_system_admin ? <DeadLettersPage /> : <NotFoundNote title={t('dl.onlyAdmins')} />;
  else if (!me.active_customer) page = <NoCustomer />;
  else if (route.name === 'fleet') page = <FleetPage key={activeId} />;
  else if (route.name === 'instance') page = <InstancePage key={`${activeId}-${route.id}`} id={route.id} />;
  else if (route.name === 'settings') page = <SettingsPage key={activeId} />;
  else if (route.name === 'maintenance') page = <MaintenancePage key={activeId} />;
  else page = <NotFound />;

  return (
    <AppCtx.Provider value={state}>
      <a class="skip" href="#main">
        {t('nav.skip')}
      </a>
      <Header route={route.name} />
      <main id="main" tabIndex={-1}>
        {page}
      </main>
    </AppCtx.Provider>
  );
}

function Header({ route }: { route: string }) {
  const { t, me, lang, setLang } = useApp();
  const liveState = useLiveState();
  const logout = async () => {
    try {
      await post('/auth/logout');
    } finally {
      live.stop();
      location.assign('/login');
    }
  };
  return (
    <header class="top">
      <div class="top-inner">
        <a href="/" class="brand" aria-label={t('nav.home')}>
          <span class="brand-mark" aria-hidden="true">
            <i class="r" />
            <i class="y" />
            <i class="g" />
          </span>
          Fleet
        </a>
        {me && (
          <nav class="main-nav" aria-label={t('nav.main')}>
            <a href="/" aria-current={route === 'fleet' || route === 'instance' ? 'page' : undefined}>
              {t('nav.fleet')}
            </a>
            <a href="/settings" aria-current={route === 'settings' ? 'page' : undefined}>
              {t('nav.settings')}
            </a>
            <a href="/maintenance" aria-current={route === 'maintenance' ? 'page' : undefined}>
              {t('nav.maintenance')}
            </a>
            {me.is_system_admin && (
              <a href="/dead-letters" aria-current={route === 'deadletters' ? 'page' : undefined}>
                {t('nav.deadLetters')}
              </a>
            )}
          </nav>
        )}
        <div class="top-tools">
          {me && <CustomerSwitcher />}
          <div class="seg" role="group" aria-label={t('nav.language')}>
            {(['de', 'en'] as const).map((l) => (
              <button key={l} type="button" aria-pressed={lang === l} onClick={() => setLang(l)} lang={l} title={t(`lang.${l}`)}>
                {l.toUpperCase()}
              </button>
            ))}
          </div>
          {me && (
            <div class="user">
              <span class="user-email" title={me.user.email}>
                {me.user.email}
              </span>
              <a href="/password" class="on-dark" aria-current={route === 'password' ? 'page' : undefined}>
                {t('nav.password')}
              </a>
              <button type="button" class="on-dark" onClick={() => void logout()}>
                {t('nav.logout')}
              </button>
            </div>
          )}
        </div>
      </div>
      {me && liveState === 'polling' && <div class="banner">{t('live.pollingBanner')}</div>}
    </header>
  );
}

function CustomerSwitcher() {
  const { t, me, refreshMe } = useApp();
  const [list, setList] = useState<MyCustomers | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    get<MyCustomers>('/api/auth/my-customers').then(setList, () => setList(null));
  }, [me?.user.id]);
  const items = list?.items ?? me?.customers ?? [];
  const active = me?.active_customer?.id ?? '';
  if (items.length === 0) return null;
  const change = async (id: string) => {
    setError(null);
    try {
      await post('/api/auth/switch-customer', { customer_id: id });
      await refreshMe();
      // Ids on the current page belong to the old customer.
      if (location.pathname.startsWith('/instances/')) navigate('/');
    } catch (e) {
      setError((e as ApiError).detail);
    }
  };
  if (items.length === 1) {
    return (
      <div class="switcher">
        <span class="sr-only">{t('nav.customer')}: </span>
        <span class="one" data-customer={items[0]!.slug}>
          {items[0]!.name || items[0]!.slug}
        </span>
      </div>
    );
  }
  return (
    <div class="switcher">
      <label for="customer-switch">{t('nav.customer')}</label>
      <select id="customer-switch" value={active} onChange={(e) => void change(e.currentTarget.value)}>
        {items.map((c) => (
          <option key={c.id} value={c.id}>
            {c.name || c.slug}
            {c.member ? '' : ` (${t('nav.asAdmin')})`}
          </option>
        ))}
      </select>
      {error && (
        <span class="sr-only" role="alert">
          {error}
        </span>
      )}
    </div>
  );
}

function NoCustomer() {
  const { t } = useApp();
  useTitle(t('nocustomer.title'));
  return (
    <>
      <PageTitle>{t('nocustomer.title')}</PageTitle>
      <p>{t('nocustomer.text')}</p>
    </>
  );
}

function NotFound() {
  const { t } = useApp();
  useTitle(t('notfound.title'));
  return <NotFoundNote title={t('notfound.title')} />;
}
