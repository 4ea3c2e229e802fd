// The quotas of the caller's customer as the read API answers them (GET /api/quotas; the model is
// lib/store/quotas.ts, docs/operations.md "Quotas per customer").
import { Type, type Static, type TSchema } from '@sinclair/typebox';

const Count = Type.Integer({ minimum: 0 });

/** What every quota says: its value, the default it overrides (or not), its unit, where it holds. */
const quota = <P extends Record<string, TSchema>>(description: string, scope: string, usage: P) =>
  Type.Object(
    {
      limit: { ...Count, description: 'the value in force for this customer' },
      default: { ...Count, description: 'the value from the environment, in force when no override is set' },
      source: Type.Union([Type.Literal('default'), Type.Literal('override')], { description: 'override: set for this customer by a system administrator (`fleet quota set`)' }),
      unit: Type.Union([Type.Literal('bytes'), Type.Literal('count'), Type.Literal('per_s'), Type.Literal('bytes_per_s')]),
      scope: Type.Literal(scope),
      ...usage,
    },
    { description },
  );

export const QuotaList = Type.Object(
  {
    customer: Type.String(),
    quotas: Type.Object({
      artifact_bytes: quota('Artifact bytes the customer may hold (artifact-init beyond it: 507)', 'customer', {
        used: { ...Count, description: 'stored + reserved' },
        stored: { ...Count, description: 'bytes of stored artifacts' },
        artifacts: { ...Count, description: 'stored artifacts' },
        reserved: { ...Count, description: 'declared sizes of uploads in progress (until they complete or expire)' },
        uploads_in_progress: Count,
      }),
      artifact_max_bytes: quota('Size of one artifact (artifact-init beyond it: 413)', 'artifact', {}),
      stream_connections: quota('Open live streams on one api replica (beyond it: 429)', 'api_replica', {
        used: { ...Count, description: 'open on the api replica that answered' },
      }),
      webhooks: quota('Webhooks (create beyond it: 409)', 'customer', { used: Count }),
      whitelist_rules: quota('Diagnostics whitelist rules (create beyond it: 409)', 'customer', { used: Count }),
      timeout_rules: quota('Timeout rules (create beyond it: 409)', 'customer', { used: Count }),
      ingest_requests_per_s: quota('Ingest requests per second (enforced by the gateways)', 'customer', {}),
      ingest_bytes_per_s: quota('Ingest request bytes per second (enforced by the gateways)', 'customer', {}),
      maintenance_windows: quota('Maintenance windows (create beyond it: 409)', 'customer', { used: Count }),
    }),
    refresh_ms: Type.Integer({ description: 'an override is in force on every gateway within this (CACHE_REFRESH_MS), on the api at once' }),
  },
  { $id: 'QuotaList', description: "The caller's customer's quotas, what each is now, and how much of each is used" },
);
export type QuotaList = Static<typeof QuotaList>;
