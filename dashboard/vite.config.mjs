// Builds the dashboard (this folder) into dist/dashboard, which the api serves: index.html for every
// page path, hashed files under /assets. No CDN, no web fonts: everything the page loads is here.
import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  publicDir: false,
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: '../dist/dashboard',
    emptyOutDir: true,
    assetsDir: 'assets',
    // Files are served from memory and gzipped by the api; a favicon stays a file (no data: URI).
    assetsInlineLimit: 0,
    target: 'es2022',
    sourcemap: false,
    modulePreload: { polyfill: false },
  },
});
