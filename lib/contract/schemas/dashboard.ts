// The dashboard's pages and files (api/handlers/dashboard.ts serves them from dist/dashboard).
import { Type } from '@sinclair/typebox';

export const DashboardAssetParams = Type.Object({
  file: Type.String({
    pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$',
    examples: ['index.js'],
    description: 'a file the dashboard build wrote to dist/dashboard/assets (names carry a content hash)',
  }),
});

export const DashboardInstanceParams = Type.Object({
  id: Type.String({
    maxLength: 64,
    examples: ['0b6f2c1e-8a4f-4c59-9f0e-4d1c2b3a4f5e'],
    description: "the instance's id; the page itself says when there is no such instance",
  }),
});
