// The dashboard: a single-page app (sources in dashboard/, built by Vite into dist/dashboard) served
// by this process. Every page path answers the same HTML shell, which holds no data: the page reads
// the JSON API with the session cookie. The files are read and gzipped once, when first asked for
// (a missing build is looked for again on the next request, so building while the api runs works).
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ApiDeps, HandlersOf } from '../types.js';
import { HttpError, notFound } from '../../lib/contract/errors.js';

/** dist/dashboard, next to dist/api (this file is dist/api/handlers/dashboard.js once compiled). */
export const DASHBOARD_DIR = fileURLToPath(new URL('../../dashboard/', import.meta.url));

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.json': 'application/json',
  '.map': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * Only this origin: scripts and styles from /assets, API calls and the event stream to the same
 * host, images from here or inline (data: URIs); no inline scripts or styles (the page and the chart
 * library set styles through the CSSOM, which the policy allows; the browser test fails on any
 * violation), no plugins, no framing.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

interface File {
  body: Buffer;
  gzip: Buffer | null;
  type: string;
}

function load(dir: string): { page: File; assets: Map<string, File> } | null {
  const indexPath = join(dir, 'index.html');
  if (!existsSync(indexPath)) return null;
  const file = (body: Buffer, type: string): File => ({ body, type, gzip: body.length > 1024 ? gzipSync(body, { level: 9 }) : null });
  const assets = new Map<string, File>();
  const assetDir = join(dir, 'assets');
  if (existsSync(assetDir)) {
    for (const name of readdirSync(assetDir)) {
      const ext = name.slice(name.lastIndexOf('.'));
      assets.set(name, file(readFileSync(join(assetDir, name)), TYPES[ext] ?? 'application/octet-stream'));
    }
  }
  return { page: file(readFileSync(indexPath), 'text/html; charset=utf-8'), assets };
}

function send(req: FastifyRequest, reply: FastifyReply, f: File, cache: string) {
  reply.type(f.type).header('Cache-Control', cache).header('X-Content-Type-Options', 'nosniff');
  if (f.gzip) {
    reply.header('Vary', 'Accept-Encoding');
    if (/\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))) return reply.header('Content-Encoding', 'gzip').send(f.gzip);
  }
  return reply.send(f.body);
}

type Page = (req: FastifyRequest, reply: FastifyReply) => unknown;

export function dashboardHandlers(_d: ApiDeps, dir = DASHBOARD_DIR): HandlersOf<'dashboard_asset'> & Record<'dashboard_fleet' | 'dashboard_login' | 'dashboard_instance' | 'dashboard_settings' | 'dashboard_dead_letters' | 'dashboard_invitation' | 'dashboard_password' | 'dashboard_reset_password' | 'dashboard_maintenance', Page> {
  let built: ReturnType<typeof load> = null;
  const files = () => {
    built ??= load(dir);
    if (!built) throw new HttpError(503, 'the dashboard is not built: `npm start` and `npm test` build it (or run `npm run build:dashboard`)');
    return built;
  };

  const page = (req: FastifyRequest, reply: FastifyReply) => {
    const f = files().page;
    reply
      .header('Content-Security-Policy', CSP)
      .header('Referrer-Policy', 'same-origin')
      .header('X-Frame-Options', 'DENY');
    // The shell names the current asset files: always ask again (an ETag-free revalidation is cheap).
    return send(req, reply, f, 'no-cache');
  };

  return {
    dashboard_fleet: page,
    dashboard_login: page,
    dashboard_instance: page,
    dashboard_settings: page,
    dashboard_dead_letters: page,
    dashboard_invitation: page,
    dashboard_password: page,
    dashboard_reset_password: page,
    dashboard_maintenance: page,
    dashboard_asset: (req, reply) => {
      const f = files().assets.get(req.params.file);
      if (!f) throw notFound('no such file');
      // Asset names carry a hash of their content: they never change.
      return send(req, reply, f, 'public, max-age=31536000, immutable');
    },
  };
}
