// A small history router: the page paths the api serves (lib/contract/routes.ts, dashboardRoutes) map to
// pages here. Same-origin links to those paths are followed without reloading; everything else
// (downloads, /docs, /api/...) is left to the browser.
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { name: 'fleet' }
  | { name: 'login' }
  | { name: 'instance'; id: string }
  | { name: 'settings' }
  | { name: 'deadletters' }
  | { name: 'invitation' }
  | { name: 'password' }
  | { name: 'resetpassword' }
  | { name: 'maintenance' }
  | { name: 'notfound' };

export function match(path: string): Route {
  if (path === '/' || path === '') return { name: 'fleet' };
  if (path === '/login') return { name: 'login' };
  if (path === '/settings') return { name: 'settings' };
  if (path === '/dead-letters') return { name: 'deadletters' };
  if (path === '/invitation') return { name: 'invitation' };
  if (path === '/password') return { name: 'password' };
  if (path === '/reset-password') return { name: 'resetpassword' };
  if (path === '/maintenance') return { name: 'maintenance' };
  const m = /^\/instances\/([^/]+)\/?$/.exec(path);
  if (m) return { name: 'instance', id: decodeURIComponent(m[1]!) };
  return { name: 'notfound' };
}

const listeners = new Set<() => void>();
const notify = () => listeners.forEach((f) => f());

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  const here = location.pathname + location.search + location.hash;
  if (to === here) return;
  if (opts.replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  notify();
  if (!to.includes('#')) window.scrollTo(0, 0);
}

window.addEventListener('popstate', notify);
// A link that changes only the fragment (the account pages' #token=…) is a new location too.
window.addEventListener('hashchange', notify);

// Follow in-app links without a reload (plain left clicks only: new tabs and downloads stay normal).
document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = (e.target as Element | null)?.closest?.('a');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || match(url.pathname).name === 'notfound') return;
  if (url.pathname === location.pathname && url.search === location.search && url.hash) return; // in-page anchor
  e.preventDefault();
  navigate(url.pathname + url.search + url.hash);
});

export interface Location {
  path: string;
  search: URLSearchParams;
  hash: string;
}

function current(): Location {
  return { path: location.pathname, search: new URLSearchParams(location.search), hash: location.hash };
}

export function useLocation(): Location {
  const [loc, setLoc] = useState(current);
  useEffect(() => {
    const f = () => setLoc(current());
    listeners.add(f);
    return () => void listeners.delete(f);
  }, []);
  return loc;
}
