// What the gateway's modules share: its dependencies, the shape of a route handler and of the
// JSON ingest routes, and the kit the metrics and artifact routes use (gateway/server.ts builds it).
// Types only: importing this file creates no cycle between the route modules.
import type { HttpResponse, HttpRequest } from './uws.js';
import type { Config } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { Metrics } from '../lib/metrics.js';
import type { HttpError } from '../lib/errors.js';
import type { Validator } from '../lib/validation.js';
import type { Redis } from '../lib/db/redis.js';
import type { ArtifactStore } from '../lib/artifacts.js';
import type { Ctx } from './request.js';
import type { TokenCache, TokenInfo } from './token-cache.js';
import type { BatchPublisher } from './publisher.js';
import type { RejectionLog } from './rejection-log.js';
import type { LicenceGate } from './licence-gate.js';
import type { HelpCoverage } from './help-coverage.js';
import type { PendingCommands } from './pending-commands.js';

export interface GatewayDeps {
  cfg: Config;
  log: Logger;
  metrics: Metrics<'gateway'>;
  tokens: TokenCache;
  publisher: BatchPublisher;
  rejections: RejectionLog;
  help: HelpCoverage;
  /** Refuses machines new to a customer past its licence grace period (in memory, no query). */
  licences: LicenceGate;
  /** Host metrics: the register of client_metric_ids seen (exact duplicate counts). */
  redis: Redis;
  /** Artifact uploads: upload records and chunks in JetStream (KV and object store). */
  artifacts: ArtifactStore;
  commands: PendingCommands;
  isReady(): boolean;
  isClosing(): boolean;
}

export type Handler = (res: HttpResponse, req: HttpRequest) => void;

export interface IngestPath {
  customer: string;
  machine: string;
  software: string;
}

/** What a route on the JSON ingest path does with a validated body instead of queueing one report. */
export type Finish = (ctx: Ctx, tok: TokenInfo, raw: Buffer, data: Record<string, unknown>, path: IngestPath, idemKey: string) => void;

export interface JsonRoute {
  /** Fixed software: the metrics path has the literal segment `logcollector` there. */
  software?: string;
  validate?: Validator<unknown>;
  finish?: Finish;
}

/** What the handlers in gateway/metrics.ts and gateway/artifacts.ts share with gateway/server.ts. */
export interface Kit {
  d: GatewayDeps;
  reject(ctx: Ctx, kind: string, err: HttpError, token?: TokenInfo, customer?: string): void;
  /** 503 / 400 / 403 / 429 checks before the body; null when already answered. */
  begin(ctx: Ctx, kind: string, path: IngestPath): { bearer: string; known: TokenInfo | undefined } | null;
  /** The token for a bearer the in-memory copy did not know; null when refused (answered). */
  resolveToken(ctx: Ctx, kind: string, bearer: string, customer: string): Promise<TokenInfo | null>;
  pendingBodies: Set<Ctx>;
  /** Counts a successful answer in fleet_gateway_responses_total. */
  answered(kind: string, status: number): void;
}
