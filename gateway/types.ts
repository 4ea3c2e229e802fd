// What the gateway's modules share: its dependencies, what the ingest core needs of a request
// (whatever transport carries it), and the shapes of its answers. Types only: importing this file
// creates no cycle, and nothing here knows uWS (gateway/http/ is the transport).
import type { Config } from '../lib/infra/config.js';
import type { Logger } from '../lib/infra/log.js';
import type { Metrics } from '../lib/infra/metrics.js';
import type { HttpError } from '../lib/contract/errors.js';
import type { Validator } from '../lib/contract/validation.js';
import type { Redis } from '../lib/infra/redis.js';
import type { ArtifactStore } from '../lib/store/artifacts.js';
import type { QuotaCache } from '../lib/store/quotas.js';
import type { ArtifactUsage } from '../lib/store/artifact-usage.js';
import type { TokenCache, TokenInfo } from './token-cache.js';
import type { IngestPublisher } from './publisher.js';
import type { RejectionLog } from './rejection-log.js';
import type { LicenceGate } from './licence-gate.js';
import type { AcceptedAnswer, HelpCoverage } from './help-coverage.js';
import type { PendingCommands } from './pending-commands.js';
import type { IdempotencyRegister } from './idempotency.js';

export interface GatewayDeps {
  cfg: Config;
  log: Logger;
  metrics: Metrics<'gateway'>;
  tokens: TokenCache;
  publisher: IngestPublisher;
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

/** What the gateway reads of a request, copied out of uWS's request object (valid only until the handler returns). */
export interface RequestHead {
  /** Path parameters, in the order of the route's placeholders. */
  params: string[];
  authorization: string;
  contentType: string;
  contentLength: string;
  idempotencyKey: string;
  /** Why the body's framing cannot be trusted (conflicting Content-Length headers), or null. */
  framing: string | null;
  /** `X-Fleet-Fault` when GATEWAY_FAULT_INJECTION is on (tests of the error boundary), else ''. */
  fault: string;
}


export interface IngestPath {
  customer: string;
  machine: string;
  software: string;
}

/**
 * What the ingest core needs of the request it serves, whatever carries it: gateway/http/request.ts
 * `Ctx` is one; a test or another transport passes a plain object.
 */
export interface Call {
  /** The client went away: work not yet begun for it is skipped. */
  readonly aborted: boolean;
  /** The report id once one is made (logged with a failure). */
  reportId: string;
  /** `fn`, with an exception in it handed to this request's error boundary (callbacks run later). */
  guard<A extends unknown[]>(fn: (...args: A) => void): (...args: A) => void;
  /** This request's error boundary. */
  readonly fail: (e: unknown) => void;
}

/** An answer the core gives: status, body and headers (a refusal is an HttpError instead). */
export interface Answer {
  status: number;
  body: string | Uint8Array;
  headers?: Record<string, string>;
}

/** What became of a request: its answer, or the refusal (answered `{"detail"}` and logged). */
export type Outcome = Answer | HttpError;
export type Done = (o: Outcome) => void;

/** A refusal before the body, with whom it is counted against in the rejection log. */
export interface Refusal {
  refused: HttpError;
  token?: TokenInfo;
  /** The customer of the path, '' when its slug is not valid. */
  customer: string;
}

/** A request past its checks before the body: its bearer, and the token when this gateway's copy knows it. */
export interface Gate {
  bearer: string;
  known: TokenInfo | undefined;
}

/** What a route on the JSON ingest path does with a validated body instead of queueing one report (host metrics, artifact-init). */
export type Finish = (call: Call, tok: TokenInfo, raw: Buffer, data: Record<string, unknown>, path: IngestPath, idemKey: string, spans: Map<number, [number, number]>, done: Done) => void;

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
  /** Whose machine it is: its ingest partition (lib/contract/messages.ts partitionOf). */
  customerId: string;
  machine: string;
  answer: AcceptedAnswer;
}

/** `take`: the request takes one rate token before its body; `has`: one must be left (a batch takes one per entry after reading them). */
export type RateMode = 'take' | 'has';
