// The docs page's static files (api/handlers/docs.ts serves a fixed list of them).
import { Type } from '@sinclair/typebox';

export const DOCS_FILES = ['swagger-ui.css', 'swagger-ui-bundle.js', 'swagger-ui-standalone-preset.js', 'favicon-32x32.png', 'favicon-16x16.png', 'init.js'] as const;

export const DocsFileParams = Type.Object({
  file: Type.String({ pattern: '^[a-z0-9][a-z0-9.-]{0,63}$', examples: ['swagger-ui.css'], description: `one of ${DOCS_FILES.join(', ')}` }),
});
