// The one HTTP helper of the tests: a request with an optional bearer token and JSON body, the
// answer parsed when it is JSON. `post` and `get` are the two common cases; `pipelined` sends
// several requests in one write.
import { connect } from 'node:net';
import { request as httpRequest } from 'node:http';

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

/**
 * A request with a raw body (artifact chunks), the way curl sends one: a server may answer before it
 * has read the body (a refusal) and close; the answer stands even when the rest of the body could
 * not be written (EPIPE, ECONNRESET after the answer). `fetch` fails such a request as a whole.
 */
export function upload(method: string, url: string, token: string | null, body: Buffer, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = httpRequest(url, { method, headers: { 'Content-Length': String(body.length), ...(token ? { Authorization: `Bearer ${token}` } : {}), ...headers } }, (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let parsed: unknown = text;
        try {
          parsed = text === '' ? null : JSON.parse(text);
        } catch {
          /* not JSON */
        }
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(', ') : v);
        resolve({ status: res.statusCode!, body: parsed, headers: h });
      });
    });
    req.on('error', (e) => {
      if (!answered) reject(e);
    });
    req.end(body);
  });
}

export const post = (url: string, token: string | null, body: unknown, headers: Record<string, string> = {}) => request('POST', url, token, body ?? {}, headers);
export const get = (url: string, token: string | null) => request('GET', url, token);

export interface RawRequest {
  path: string;
  method?: string;
  token?: string | null;
  headers?: Record<string, string>;
  body?: string;
}

/**
 * Sends `requests` on one connection in one write (HTTP/1.1 pipelining) and resolves with their
 * answers, in order. They reach the server in one read, which uWS parses and dispatches request by
 * request in one synchronous pass (gateway/http/request.ts, "quarantine"): nothing else runs in between,
 * so their clock readings differ by microseconds, however loaded the machine. uWS serves pipelined
 * requests only while each is answered before the next is parsed (a refusal); a request that waits
 * for JetStream makes it close the connection, which rejects here.
 */
export function pipelined(baseUrl: string, requests: RawRequest[], timeoutMs = 15_000): Promise<Answer[]> {
  const u = new URL(baseUrl);
  const bytes = Buffer.concat(
    requests.map((r) => {
      const body = Buffer.from(r.body ?? '');
      const headers: Record<string, string> = {
        Host: u.host,
        'Content-Type': 'application/json',
        'Content-Length': String(body.length),
        ...(r.token ? { Authorization: `Bearer ${r.token}` } : {}),
        ...r.headers,
      };
      const head = `${r.method ?? 'POST'} ${r.path} HTTP/1.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
      return Buffer.concat([Buffer.from(head), body]);
    }),
  );
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const answers: Answer[] = [];
    const sock = connect(Number(u.port), u.hostname, () => sock.write(bytes));
    const timer = setTimeout(() => finish(new Error(`${answers.length} of ${requests.length} pipelined requests answered within ${timeoutMs} ms`)), timeoutMs);
    function finish(err: Error | null): void {
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(answers);
    }
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
        const headers = new Headers();
        for (const l of lines.slice(1)) {
          const i = l.indexOf(':');
          headers.append(l.slice(0, i).trim(), l.slice(i + 1).trim());
        }
        const length = Number(headers.get('content-length') ?? 0);
        if (buf.length < end + 4 + length) return;
        const text = buf.subarray(end + 4, end + 4 + length).toString();
        buf = buf.subarray(end + 4 + length);
        let body: unknown = text;
        try {
          body = text === '' ? null : JSON.parse(text);
        } catch {
          /* not JSON */
        }
        answers.push({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0]!)?.[1]), body, headers });
        if (answers.length === requests.length) return finish(null);
      }
    });
    sock.on('close', () => finish(new Error(`the connection closed after ${answers.length} of ${requests.length} pipelined answers`)));
    sock.on('error', () => {});
  });
}
