// The one module that loads uWebSockets.js, and the refusal of its slow fallback.
//
// Which build: UWS_MODULE, a package name resolved from the project (default `uWebSockets.js`, the
// npm alias of @trufflesuite/uws-js-unofficial: the only build on the npm registry with Node 20
// binaries for glibc 2.36) or an absolute path to a build's folder or its `uws.js`. A deployment
// on a supported Node supplies a current official build that way without a code change
// (docs/deploy.md, "Runtime end of life"). Everything else imports uWS's types from here only.
//
// The registry build silently switches to a pure-JS server when its native binary does not load.
// That server is several times slower: running the gateway on it would look fine in a test and
// fall over in production. So: native, or an error, unless the operator explicitly allows the
// fallback (UWS_ALLOW_FALLBACK=1).
import { createRequire } from 'node:module';
import { isAbsolute, resolve } from 'node:path';
import type * as UWS from 'uWebSockets.js';

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';

export class UwsFallbackError extends Error {
  constructor(readonly module: string) {
    super(
      `uWebSockets.js (${module}) loaded a pure-JS fallback instead of the native binary (unsupported Node.js or glibc, ` +
        'or UWS_USE_FALLBACK set). Refusing to start; set UWS_ALLOW_FALLBACK=1 to run on the slow fallback anyway.',
    );
    this.name = 'UwsFallbackError';
  }
}

/**
 * Loads the build named by `module` (UWS_MODULE). Native means the module's exports are those of a
 * loaded `uws_<platform>_<arch>_<abi>.node` binary, as with every build that has one (the
 * registry's and the official ones re-export the binary itself); a fallback exports something else.
 */
export function loadUws(allowFallback: boolean, module = 'uWebSockets.js'): { uws: typeof UWS; native: boolean } {
  const require = createRequire(import.meta.url);
  // A relative path is taken from the working directory, as an operator writes it.
  const id = module.startsWith('.') ? resolve(module) : module;
  const uws = require(isAbsolute(id) ? resolve(id) : id) as typeof UWS;
  const native = Object.values(require.cache).some((m) => m !== undefined && /uws_[a-z0-9_]+\.node$/.test(m.filename) && m.exports === uws);
  if (!native && !allowFallback) throw new UwsFallbackError(module);
  return { uws, native };
}
