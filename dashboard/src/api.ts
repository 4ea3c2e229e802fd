// The JSON API, as the page calls it: same origin, the HttpOnly session cookie (never a token in
// storage), errors as ApiError with the server's `detail`.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly body: unknown,
  ) {
    super(detail);
  }
}

let onUnauthorized: () => void = () => {};
/** Called when any request answers 401 (the session ended): the app shows the login page. */
export function setUnauthorizedHandler(f: () => void): void {
  onUnauthorized = f;
}

export async function request<T>(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let r: Response;
  try {
    r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin', signal });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, 'the server cannot be reached', null);
  }
  if (r.status === 204) return undefined as T;
  const text = await r.text();
  let data: unknown = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!r.ok) {
    if (r.status === 401 && path !== '/auth/login') onUnauthorized();
    const detail = data && typeof data === 'object' && 'detail' in data ? String((data as { detail: unknown }).detail) : `HTTP ${r.status}`;
    throw new ApiError(r.status, detail, data);
  }
  return data as T;
}

export const get = <T>(path: string, signal?: AbortSignal) => request<T>('GET', path, undefined, signal);
export const post = <T>(path: string, body?: unknown) => request<T>('POST', path, body);
export const put = <T>(path: string, body?: unknown) => request<T>('PUT', path, body);
export const del = <T>(path: string) => request<T>('DELETE', path);

/** `?a=1&b=2` from an object, leaving out undefined, null and empty values. */
export function qs(params: Record<string, string | number | boolean | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** A route this server does not have (a feature not deployed): a 404 "no such endpoint". */
export function missingFeature(e: unknown): boolean {
  return e instanceof ApiError && e.status === 404 && /^no such endpoint/.test(e.detail);
}
