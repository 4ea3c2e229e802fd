// Loads uWebSockets.js and refuses the slow fallback.
//
// The package we depend on (npm alias of @trufflesuite/uws-js-unofficial, the only build on the npm
// registry with Node 20 binaries for glibc 2.36) silently switches to a pure-JS server when its
// native binary does not load. That server is several times slower: running the gateway on it would
// look fine in a test and fall over in production. So: native, or an error, unless the operator
// explicitly allows the fallback (UWS_ALLOW_FALLBACK=1).
import { createRequire } from 'node:module';
import type * as UWS from 'uWebSockets.js';

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';

export class UwsFallbackError extends Error {
  constructor() {
    super(
      'uWebSockets.js loaded its pure-JS fallback instead of the native binary (unsupported Node.js or glibc, ' +
        'or UWS_USE_FALLBACK set). Refusing to start; set UWS_ALLOW_FALLBACK=1 to run on the slow fallback anyway.',
    );
    this.name = 'UwsFallbackError';
  }
}

export function loadUws(allowFallback: boolean): { uws: typeof UWS; native: boolean } {
  const require = createRequire(import.meta.url);
  const uws = require('uWebSockets.js') as typeof UWS;
  const native = Object.keys(require.cache).some((p) => /uws_[a-z0-9_]+\.node$/.test(p));
  if (!native && !allowFallback) throw new UwsFallbackError();
  return { uws, native };
}
