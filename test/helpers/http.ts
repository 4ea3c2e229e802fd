// The one HTTP helper of the tests: a request with an optional bearer token and JSON body, the
// answer parsed when it is JSON. `post` and `get` are the two common cases.
export interface Answer {
  status: number;
  /** Parsed JSON, or the text when it is not JSON. */
  body: any;
  headers: Headers;
}

export async function request(method: string, url: string, token: string | null, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const r = await fetch(url, {
    method,
    headers: { ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...(token ? { Authorization: `Bearer ${token}` } : {}), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let parsed: unknown = text;
  try {
    parsed = text === '' ? null : JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.status, body: parsed, headers: r.headers };
}

export const post = (url: string, token: string | null, body: unknown, headers: Record<string, string> = {}) => request('POST', url, token, body ?? {}, headers);
export const get = (url: string, token: string | null) => request('GET', url, token);
