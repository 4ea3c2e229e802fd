// The OpenAPI document (lib/contract/openapi.ts, built once at start from lib/contract/routes.ts) and a readable
// page for it: Swagger UI from the swagger-ui-dist package, served from this process (no CDN).
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ApiDeps, HandlersOf } from '../types.js';
import { notFound } from '../../lib/contract/errors.js';
import { openApiDocument } from '../../lib/contract/openapi.js';
import { DOCS_FILES } from '../../lib/contract/schemas/docs.js';

const require = createRequire(import.meta.url);

/** The project's version, from the nearest package.json named fleet-ingest above this file. */
export function projectVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    const p = join(dir, 'package.json');
    if (existsSync(p)) {
      const pkg = JSON.parse(readFileSync(p, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'fleet-ingest' && pkg.version) return pkg.version;
    }
    dir = dirname(dir);
  }
  return '0.0.0';
}

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>fleet-ingest API</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="stylesheet" href="/docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png" sizes="32x32">
</head>
<body>
  <noscript>This page renders <a href="/openapi.json">/openapi.json</a>; it needs JavaScript.</noscript>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/swagger-ui-standalone-preset.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
`;

const INIT = `window.addEventListener('load', function () {
  window.ui = SwaggerUIBundle({
    url: '/openapi.json',
    dom_id: '#swagger-ui',
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    layout: 'StandaloneLayout',
  });
});
`;

const TYPES: Record<string, string> = { '.css': 'text/css; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.png': 'image/png' };

export function docsHandlers(d: ApiDeps): HandlersOf<'docs_asset' | 'docs_page' | 'openapi_document'> {
  const doc = JSON.stringify(openApiDocument({ gatewayUrl: d.cfg.api.publicGatewayUrl, apiUrl: d.cfg.api.publicApiUrl, version: projectVersion() }));
  const dist = dirname(require.resolve('swagger-ui-dist/package.json'));
  const files = new Map<string, { body: Buffer; type: string }>();
  for (const f of DOCS_FILES) {
    const body = f === 'init.js' ? Buffer.from(INIT) : readFileSync(join(dist, f));
    files.set(f, { body, type: TYPES[f.slice(f.lastIndexOf('.'))] ?? 'application/octet-stream' });
  }

  return {
    openapi_document: (_req, reply) => reply.type('application/json').send(doc),
    docs_page: (_req, reply) => reply.type('text/html; charset=utf-8').send(PAGE),
    docs_asset: (req, reply) => {
      const f = files.get(req.params.file);
      if (!f) throw notFound('no such file');
      return reply.type(f.type).header('Cache-Control', 'public, max-age=3600').send(f.body);
    },
  };
}
