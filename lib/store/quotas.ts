// Quotas per customer: how much of a shared resource one customer may take, so that no customer
// can take it from the others (docs/operations.md "Quotas per customer"). The model is here, once:
//
//   - every quota, its unit, its default setting (lib/infra/config.ts) and its column in Postgres;
//   - per-customer overrides a system administrator sets (`customer_quotas`, `fleet quota set`);
//     a NULL column, or no row, means the default;
//   - the effective quotas of a customer (`loadQuotas`, one query) and, for hot paths, a copy of
//     every override and of every customer's stored artifact bytes in memory (`QuotaCache`,
//     refreshed every CACHE_REFRESH_MS like the token cache: an override reaches every gateway
//     within about a second, and nothing is queried per request).
//
// Where each is enforced: artifact_bytes and artifact_max_bytes at artifact-init (gateway,
// lib/store/artifact-usage.ts keeps the reservations of uploads in progress), stream_connections when a
// live stream opens (api, per replica), webhooks, whitelist_rules and maintenance_windows at create (api),
// ingest_requests_per_s and ingest_bytes_per_s on the ingest path (gateway; stored and shown here).
import { ingestRates, type Config } from '../infra/config.js';

export type IngestRates = ReturnType<typeof ingestRates>;
import type { Pool, PoolClient } from '../infra/postgres.js';
import { SyncedMap, type SyncedSource } from '../infra/synced-map.js';
import { databaseNow } from './clock.js';

export type QuotaUnit = 'bytes' | 'count' | 'per_s' | 'bytes_per_s';

export interface QuotaDef {
  /** The quota's name in the api, the CLI (`--artifact-bytes`), metrics and `{"detail"}`: also its column. */
  name: QuotaName;
  unit: QuotaUnit;
  /** The environment variable of its default (lib/infra/config.ts). */
  env: string;
  /** Smallest override allowed. */
  min: number;
  /** Largest override allowed (Postgres integer columns are 32-bit). */
  max: number;
  description: string;
  default(q: Config['quotas']): number;
}

const INT32 = 2_147_483_647;
const BIG = Number.MAX_SAFE_INTEGER;

/** Every quota, in the order the api, the CLI and the docs list them. */
export const QUOTAS = [
  {
    name: 'artifact_bytes',
    unit: 'bytes',
    env: 'QUOTA_ARTIFACT_BYTES',
    min: 0,
    max: BIG,
    description: 'artifact bytes held: stored artifacts plus the declared sizes of uploads in progress',
    default: (q) => q.artifactBytes,
  },
  {
    name: 'artifact_max_bytes',
    unit: 'bytes',
    env: 'ARTIFACT_MAX_BYTES',
    min: 1,
    max: BIG,
    description: 'size of one artifact',
    default: (q) => q.artifactMaxBytes,
  },
  {
    name: 'stream_connections',
    unit: 'count',
    env: 'QUOTA_STREAM_CONNECTIONS',
    min: 0,
    max: INT32,
    description: 'open live streams (GET /api/fleet/stream) per api replica',
    default: (q) => q.streamConnections,
  },
  {
    name: 'webhooks',
    unit: 'count',
    env: 'WEBHOOKS_PER_CUSTOMER',
    min: 0,
    max: INT32,
    description: 'webhooks registered',
    default: (q) => q.webhooks,
  },
  {
    name: 'whitelist_rules',
    unit: 'count',
    env: 'WHITELIST_MAX_RULES',
    min: 0,
    max: INT32,
    description: 'diagnostics whitelist rules',
    default: (q) => q.whitelistRules,
  },
  {
    name: 'timeout_rules',
    unit: 'count',
    env: 'TIMEOUT_RULES_PER_CUSTOMER',
    min: 0,
    max: INT32,
    description: 'timeout rules (per-instance timeouts and late shares)',
    default: (q) => q.timeoutRules,
  },
  {
    name: 'ingest_requests_per_s',
    unit: 'per_s',
    env: 'QUOTA_INGEST_REQUESTS_PER_S',
    min: 1,
    max: INT32,
    description: 'ingest requests per second',
    default: (q) => q.ingestRequestsPerS,
  },
  {
    name: 'ingest_bytes_per_s',
    unit: 'bytes_per_s',
    env: 'QUOTA_INGEST_BYTES_PER_S',
    min: 1,
    max: BIG,
    description: 'ingest request bytes per second',
    default: (q) => q.ingestBytesPerS,
  },
  {
    name: 'maintenance_windows',
    unit: 'count',
    env: 'MAINTENANCE_WINDOWS_PER_CUSTOMER',
    min: 0,
    max: INT32,
    description: 'maintenance windows defined',
    default: (q) => q.maintenanceWindows,
  },
] as const satisfies readonly (Omit<QuotaDef, 'name'> & { name: string })[];

export type QuotaName = (typeof QUOTAS)[number]['name'];
export const QUOTA_NAMES = QUOTAS.map((q) => q.name) as QuotaName[];
export const quotaDef = (name: QuotaName): QuotaDef => QUOTAS.find((q) => q.name === name)! as QuotaDef;

/** A customer's effective quotas: every quota's value. */
export type Quotas = Record<QuotaName, number>;
/** Overrides of one customer: a value, or null for the default. */
export type QuotaOverrides = Partial<Record<QuotaName, number | null>>;

export function quotaDefaults(cfg: Pick<Config, 'quotas'>): Quotas {
  return Object.fromEntries(QUOTAS.map((q) => [q.name, q.default(cfg.quotas)])) as Quotas;
}

/** The overrides over the defaults. */
export function effectiveQuotas(defaults: Quotas, overrides: QuotaOverrides | undefined): Quotas {
  const out = { ...defaults };
  if (overrides) for (const n of QUOTA_NAMES) if (overrides[n] !== null && overrides[n] !== undefined) out[n] = overrides[n]!;
  return out;
}

/** Each quota's value and where it comes from (the api's and the CLI's view). */
export function quotaView(defaults: Quotas, overrides: QuotaOverrides | undefined) {
  return Object.fromEntries(
    QUOTAS.map((q) => {
      const o = overrides?.[q.name];
      const set = o !== null && o !== undefined;
      return [q.name, { limit: set ? o : defaults[q.name], default: defaults[q.name], source: set ? ('override' as const) : ('default' as const), unit: q.unit }];
    }),
  ) as Record<QuotaName, { limit: number; default: number; source: 'override' | 'default'; unit: QuotaUnit }>;
}

const COLUMNS = QUOTA_NAMES.join(', ');

interface OverrideRow extends Record<QuotaName, number | null> {
  customer_id: string;
  updated_at: Date;
}

const overridesOf = (r: OverrideRow): QuotaOverrides => Object.fromEntries(QUOTA_NAMES.map((n) => [n, r[n]]));

/** The overrides of one customer ({} when it has none). */
export async function loadOverrides(pool: Pool | PoolClient, customerId: string): Promise<QuotaOverrides> {
  const r = await pool.query<OverrideRow>(`SELECT customer_id, ${COLUMNS}, updated_at FROM customer_quotas WHERE customer_id = $1`, [customerId]);
  return r.rows[0] ? overridesOf(r.rows[0]) : {};
}

/**
 * A customer's effective quotas, read from Postgres now (one query). For code that is not on a hot
 * path (the api's stream, webhook and whitelist checks, the CLI); the gateway reads its QuotaCache.
 */
export async function loadQuotas(pool: Pool | PoolClient, cfg: Pick<Config, 'quotas'>, customerId: string): Promise<Quotas> {
  return effectiveQuotas(quotaDefaults(cfg), await loadOverrides(pool, customerId));
}

export class QuotaError extends Error {
  override name = 'QuotaError';
}

/** Checks a change before it is written: every value an integer within the quota's bounds, or null. */
export function checkOverrides(change: QuotaOverrides): void {
  for (const [name, v] of Object.entries(change)) {
    const def = QUOTAS.find((q) => q.name === name);
    if (!def) throw new QuotaError(`unknown quota ${name}: use ${QUOTA_NAMES.join(', ')}`);
    if (v === null) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < def.min || v > def.max) {
      throw new QuotaError(`${name} must be a whole number from ${def.min} to ${def.max}${def.unit === 'bytes' || def.unit === 'bytes_per_s' ? ' (bytes)' : ''}, or default`);
    }
  }
}

/**
 * Sets (a number) or clears (null: back to the default) some overrides of a customer; the others
 * stay. Every gateway applies the change within CACHE_REFRESH_MS, the api at its next request.
 */
export async function setOverrides(pool: Pool, customerId: string, change: QuotaOverrides): Promise<QuotaOverrides> {
  checkOverrides(change);
  const names = Object.keys(change) as QuotaName[];
  if (names.length === 0) return loadOverrides(pool, customerId);
  const values = names.map((n) => change[n]);
  await pool.query(
    `INSERT INTO customer_quotas (customer_id, ${names.join(', ')}) VALUES ($1, ${names.map((_, i) => `$${i + 2}`).join(', ')})
     ON CONFLICT (customer_id) DO UPDATE SET ${names.map((n) => `${n} = EXCLUDED.${n}`).join(', ')}`,
    [customerId, ...values],
  );
  return loadOverrides(pool, customerId);
}

/** Stored artifact bytes of a customer (Postgres `artifact_usage`, kept by a trigger on `artifacts`). */
export interface ArtifactStored {
  bytes: number;
  artifacts: number;
  /** Counts every change of the row: a reservation settled at seq s is in `bytes` once seq >= s (lib/store/artifact-usage.ts). */
  seq: number;
}

interface UsageRow {
  customer_id: string;
  bytes: number;
  artifacts: number;
  seq: number;
  updated_at: Date;
}

const NO_USAGE: ArtifactStored = { bytes: 0, artifacts: 0, seq: 0 };

export async function loadArtifactStored(pool: Pool, customerId: string): Promise<ArtifactStored> {
  const r = await pool.query<UsageRow>('SELECT customer_id, bytes, artifacts, seq, updated_at FROM artifact_usage WHERE customer_id = $1', [customerId]);
  const u = r.rows[0];
  return u ? { bytes: u.bytes, artifacts: u.artifacts, seq: u.seq } : NO_USAGE;
}

/** What a customer holds of the quotas counted in Postgres: webhooks, whitelist rules not deleted, timeout rules, maintenance windows. */
export async function countQuotaUse(pool: Pool, customerId: string): Promise<{ webhooks: number; rules: number; timeoutRules: number; maintenance_windows: number }> {
  const r = await pool.query<{ webhooks: number; rules: number; timeoutRules: number; maintenance_windows: number }>(
    `SELECT (SELECT count(*)::int FROM webhooks WHERE customer_id = $1) AS webhooks,
                  (SELECT count(*)::int FROM whitelist_rules WHERE customer_id = $1 AND deleted_at IS NULL) AS rules,
                  (SELECT count(*)::int FROM timeout_rules WHERE customer_id = $1) AS "timeoutRules",
                  (SELECT count(*)::int FROM maintenance_windows WHERE customer_id = $1) AS maintenance_windows`,
    [customerId],
  );
  return r.rows[0]!;
}

const OVERRIDES = `SELECT customer_id, ${COLUMNS}, updated_at FROM customer_quotas`;

/** Every customer's overrides, as QuotaCache's SyncedMap reads them. */
const overridesCopy: SyncedSource<OverrideRow> = {
  now: databaseNow,
  all: async (pool) => (await pool.query<OverrideRow>(OVERRIDES)).rows,
  changedSince: async (pool, since) => (await pool.query<OverrideRow>(`${OVERRIDES} WHERE updated_at > $1`, [since])).rows,
};

const USAGE = 'SELECT customer_id, bytes, artifacts, seq, updated_at FROM artifact_usage';

/** Every customer's stored artifact bytes, as QuotaCache's SyncedMap reads them. */
const usageCopy: SyncedSource<UsageRow> = {
  now: databaseNow,
  all: async (pool) => (await pool.query<UsageRow>(USAGE)).rows,
  changedSince: async (pool, since) => (await pool.query<UsageRow>(`${USAGE} WHERE updated_at > $1`, [since])).rows,
};

/**
 * Every customer's overrides and stored artifact bytes in memory, refreshed every `intervalMs`
 * (rows changed since the last poll, everything every minute: lib/infra/synced-map.ts). `quotas()` and
 * `artifactStored()` answer synchronously; `ageMs` says how old the copy is (a copy that could not be
 * refreshed for long must not decide: lib/store/artifact-usage.ts).
 */
export class QuotaCache {
  private readonly defaults: Quotas;
  private readonly overrides: SyncedMap<OverrideRow, QuotaOverrides>;
  private readonly usage: SyncedMap<UsageRow, ArtifactStored>;

  private readonly rates = new WeakMap<QuotaOverrides, IngestRates>();
  private readonly largestBody: number;

  constructor(pool: Pool, cfg: Pick<Config, 'quotas' | 'gateway'>, intervalMs: number, onError: (e: unknown) => void) {
    this.defaults = quotaDefaults(cfg);
    this.largestBody = Math.max(cfg.gateway.bodyLimit, cfg.gateway.batchBodyLimit);
    this.overrides = new SyncedMap({ pool, source: overridesCopy, key: (r) => r.customer_id, value: overridesOf, intervalMs, onError });
    this.usage = new SyncedMap({
      pool,
      source: usageCopy,
      key: (r) => r.customer_id,
      value: (r) => ({ bytes: r.bytes, artifacts: r.artifacts, seq: r.seq }),
      intervalMs,
      onError,
    });
  }

  async start(): Promise<void> {
    await Promise.all([this.overrides.start(), this.usage.start()]);
  }

  stop(): void {
    this.overrides.stop();
    this.usage.stop();
  }

  async refresh(): Promise<void> {
    await Promise.all([this.overrides.refresh(), this.usage.refresh()]);
  }

  /** The effective quotas of a customer (the defaults for one without overrides). */
  quotas(customerId: string): Quotas {
    return effectiveQuotas(this.defaults, this.overrides.get(customerId));
  }

  /**
   * The token buckets of a customer's ingest quotas when it has an override of either (the hot
   * path: one map lookup, and the buckets made once per override), else null: the defaults.
   */
  ingestRates(customerId: string): IngestRates | null {
    const o = this.overrides.get(customerId);
    if (!o || (o.ingest_requests_per_s == null && o.ingest_bytes_per_s == null)) return null;
    let r = this.rates.get(o);
    if (!r) {
      const q = effectiveQuotas(this.defaults, o);
      this.rates.set(o, (r = ingestRates(q.ingest_requests_per_s, q.ingest_bytes_per_s, this.largestBody)));
    }
    return r;
  }

  artifactStored(customerId: string): ArtifactStored {
    return this.usage.get(customerId) ?? NO_USAGE;
  }

  /** How old the older of the two copies is (ms since its last successful refresh). */
  get ageMs(): number {
    return Date.now() - Math.min(this.overrides.lastRefresh, this.usage.lastRefresh);
  }
}

// ---- bytes as people write them (the CLI) ----

const UNITS: Record<string, number> = {
  b: 1,
  k: 1000,
  kb: 1000,
  m: 1000 ** 2,
  mb: 1000 ** 2,
  g: 1000 ** 3,
  gb: 1000 ** 3,
  t: 1000 ** 4,
  tb: 1000 ** 4,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
  tib: 1024 ** 4,
};

/** `10GiB`, `500 MB`, `1.5GiB`, `1048576` -> bytes (SI units are powers of 1000, IEC of 1024); null when it is none of these. */
export function parseBytes(text: string): number | null {
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (!m) return null;
  const unit = m[2]!.toLowerCase();
  const factor = unit === '' ? 1 : UNITS[unit];
  if (factor === undefined) return null;
  const n = Number(m[1]) * factor;
  if (!Number.isFinite(n) || !Number.isSafeInteger(Math.round(n))) return null;
  if (unit === '' && !Number.isInteger(Number(m[1]))) return null;
  return Math.round(n);
}

/** Bytes for people: `10 GiB`, `1.5 MiB`, `512 B`. */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${Number(v.toFixed(2))} ${units[i]}`;
}

/** A quota's value with its unit, for a `{"detail"}`: `artifact_bytes = 10737418240 bytes (10 GiB)`. */
export function describeQuota(name: QuotaName, value: number): string {
  const unit = quotaDef(name).unit;
  if (unit === 'bytes') return `${name} = ${value} bytes (${formatBytes(value)})`;
  if (unit === 'bytes_per_s') return `${name} = ${value} bytes/s (${formatBytes(value)}/s)`;
  if (unit === 'per_s') return `${name} = ${value}/s`;
  return `${name} = ${value}`;
}

/**
 * The `artifact_usage.seq` of these customers (those without a row are left out): from that seq on
 * their stored bytes count the artifacts written before the read, which is when a reservation is
 * settled (lib/store/artifact-usage.ts).
 */
export async function artifactUsageSeqs(db: Pool | PoolClient, customerIds: string[]): Promise<Map<string, number>> {
  const r = await db.query<{ customer_id: string; seq: number }>('SELECT customer_id, seq FROM artifact_usage WHERE customer_id = ANY($1::uuid[])', [customerIds]);
  return new Map(r.rows.map((x) => [x.customer_id, x.seq]));
}
