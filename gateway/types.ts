// What the gateway's modules share: its dependencies, the shape of a route handler and of the
// JSON ingest routes, and the kit the metrics and artifact routes use (gateway/server.ts builds it).
// Types only: importing this file creates no cycle between the route modules.
import type { HttpResponse, HttpRequest } from './uws.js';
import type { Config } from '../lib/infra/config.js';
import type { Logger } from '../lib/infra/log.js';
import type { Metrics } from '../lib/infra/metrics.js';
import type { HttpError } from '../lib/contract/errors.js';
import type { Validator } from '../lib/contract/validation.js';
import type { Redis } from '../lib/infra/redis.js';
import type { ArtifactStore } from '../lib/store/artifacts.js';
import type { QuotaCache } from '../lib/store/quotas.js';
import type { ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { Ctx } from './request.js';
import type { TokenCache, TokenInfo } from './token-cache.js';
import type { LanePublisher } from './publisher.js';
import type { RejectionLog } from './rejection-log.js';
import type { LicenceGate } from './licence-gate.js';
import type { HelpCoverage } from './help-coverage.js';
import type { PendingCommands } from './pending-commands.js';
import type { IdempotencyRegister } from './idempotency.js';
import type { CheckedKind } from '../lib/domain/report-check.js';

export interface GatewayDeps {
  cfg: Config;
  log: Logger;
  metrics: Metrics<'gateway'>;
  tokens: TokenCache;
  publisher: LanePublisher;
  rejections: RejectionLog;
  help: HelpCoverage;
  /** Refuses machines new to a customer past its licence grace period (in memory, no query). */
  licences: LicenceGate;
  /** Host metrics: the register of client_metric_ids seen (exact duplicate counts). */
  redis: Redis;
  /** Artifact uploads: upload records and chunks in JetStream (KV and object store). */
  artifacts: ArtifactStore;
  /** Every customer's effective quotas and stored artifact bytes in memory (lib/store/quotas.ts), refreshed every CACHE_REFRESH_MS. */
  quotas: QuotaCache;
  /** Reservations of artifact uploads in progress (Redis), against the quota artifact_bytes. */
  artifactUsage: ArtifactUsage;
  commands: PendingCommands;
  /** Which body each Idempotency-Key was first used with (422 for another). */
  idempotency: IdempotencyRegister;
  isReady(): boolean;
  isClosing(): boolean;
}

/** The kinds that arrive as a JSON body on the ingest path (their policies: gateway/admission.ts `KINDS`). */
export type JsonKind = 'heartbeat' | 'diagnostics' | 'status' | 'help' | 'metrics' | 'artifact-init' | 'command_ack';

export type Handler = (res: HttpResponse, req: HttpRequest) => void;

export interface IngestPath {
  customer: string;
  machine: string;
  software: string;
}

/** What a route on the JSON ingest path does with a validated body instead of queueing one report. */
export type Finish = (ctx: Ctx, tok: TokenInfo, raw: Buffer, data: Record<string, unknown>, path: IngestPath, idemKey: string, spans: Map<number, [number, number]>) => void;

export interface JsonRoute {
  /** Fixed software: the metrics path has the literal segment `logcollector` there. */
  software?: string;
  validate?: Validator<unknown>;
  /** The values whose raw bytes `finish` gets (gateway/json-scan.ts span path), e.g. `['items', '*']`. */
  spanPath?: readonly string[];
  finish?: Finish;
}

/** A report ready for the publisher: its id, its bytes as queued, and the answer once JetStream has it. */
export interface PreparedReport {
  id: string;
  report: Buffer;
  answer: { status: number; body: string | Uint8Array };
}

/** `take`: the request takes one rate token before its body; `has`: one must be left (a batch takes one per entry after reading them). */
export type RateMode = 'take' | 'has';

/** What the handlers in gateway/metrics.ts, gateway/artifacts.ts and gateway/batch.ts share with gateway/server.ts. */
export interface Kit {
  d: GatewayDeps;
  reject(ctx: Ctx, kind: string, err: HttpError, token?: TokenInfo, customer?: string): void;
  /** 503 / 400 / 403 / 429 checks before the body; null when already answered. A batch's path has only the customer. */
  begin(ctx: Ctx, kind: string, path: Pick<IngestPath, 'customer'> & Partial<IngestPath>, rate?: RateMode): { bearer: string; known: TokenInfo | undefined } | null;
  /** The token for a bearer the in-memory copy did not know; null when refused (answered). */
  resolveToken(ctx: Ctx, kind: string, bearer: string, path: Pick<IngestPath, 'customer'> & Partial<IngestPath>, rate?: RateMode): Promise<TokenInfo | null>;
  pendingBodies: Set<Ctx>;
  /** Counts an answer in fleet_gateway_responses_total (reject counts its own). */
  answered(kind: string, status: number): void;
  /** The steps of a report after its body is parsed, one copy for the single routes and the batch. */
  reports: {
    validatorOf(kind: CheckedKind): Validator<unknown>;
    /** Schema (422), beyond it (413/422), licence (403); null: storable and allowed. */
    bodyRefusal(kind: JsonKind, validate: Validator<unknown>, tok: TokenInfo, machine: string, data: Record<string, unknown>, rawSize: number): HttpError | null;
    /** The report to queue and its answer, or 413 (over the queue's message limit). */
    prepare(kind: JsonKind, tok: TokenInfo, path: IngestPath, raw: Buffer, data: unknown, idemKey: string, commandId?: string): HttpError | PreparedReport;
  };
  /** The per-token and per-customer rates: a batch takes one of each per entry. */
  rate: {
    /** Takes up to n requests of this token's and its customer's buckets: how many both allow. */
    takeUpTo(tok: TokenInfo, n: number): number;
    /** The 429 of a request (or entry) over the rate, with Retry-After. */
    overRate(): HttpError;
    /** The customer's byte rate for a body of `size` bytes: null, or the 429. */
    overBytes(tok: TokenInfo, size: number): HttpError | null;
    /** Before the body: its Content-Length over what the customer's byte rate has now: the 429 (closing the connection). */
    announcedOverBytes(tok: TokenInfo | undefined, contentLength: string): HttpError | null;
  };
}
