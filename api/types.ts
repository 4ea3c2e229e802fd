// What the api's modules share: its dependencies and the type of each route handler. Types only:
// importing this file creates no cycle between api/server.ts and the handler modules.
//
// Handlers are typed from the route table (lib/contract/routes.ts) through Fastify's TypeBox type provider:
// the handler of `list_instances` receives `req.query` as `Static<InstanceListQuery>`, the schema
// Fastify validated it with, so no handler casts what it reads.
import type { WhitelistChecks } from './whitelist-check.js';
import type { FastifyReply, FastifyRequest, RawRequestDefaultExpression, RawServerDefault, RouteGenericInterface } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { TSchema } from '@sinclair/typebox';
import type { Config } from '../lib/infra/config.js';
import type { Logger } from '../lib/infra/log.js';
import type { Metrics } from '../lib/infra/metrics.js';
import type { Pool } from '../lib/infra/postgres.js';
import type { ClickHouseClient } from '../lib/infra/clickhouse.js';
import type { Redis } from '../lib/infra/redis.js';
import type { ArtifactStore } from '../lib/store/artifacts.js';
import type { CommandHints } from '../lib/store/commands.js';
import type { TimeoutRuleHints } from '../lib/store/timeout-rules.js';
import type { routes } from '../lib/contract/routes.js';
import type { Sessions } from './session.js';
import type { LightHub } from './light-stream.js';
import type { DeadLetters } from '../lib/store/dead-letters.js';
import type { Mailer } from './mail.js';

export interface ApiDeps {
  cfg: Config;
  log: Logger;
  metrics: Metrics<'api'>;
  pool: Pool;
  ch: ClickHouseClient;
  redis: Redis;
  sessions: Sessions;
  /** Artifact chunks in NATS; null until the api has connected to NATS (downloads answer 503). */
  artifacts: () => ArtifactStore | null;
  /** The live stream of traffic-light changes (fed from NATS). */
  lights: LightHub;
  /** Tells the gateways (core NATS) that an instance's open agent commands changed. */
  hints: CommandHints;
  /** Tells the workers (core NATS) that a customer's timeout rules changed; absent: not told (their copies expire). */
  ruleHints?: TimeoutRuleHints;
  /** The dead-letter stream; null until the api has connected to NATS (its routes answer 503). */
  deadLetters: () => DeadLetters | null;
  /** The check of a whitelist rule set against SUFFIX_CHAIN_MAX, in a worker thread. */
  whitelistChecks: WhitelistChecks;
  /** E-mail (api/mail.ts); absent: made from cfg.mail by buildApi. */
  mailer?: Mailer;
}

type Route = (typeof routes)[number];
type ApiRoute = Extract<Route, { service: 'api' }>;
type Part<R, K extends string> = R extends { readonly [P in K]: infer S extends TSchema } ? S : undefined;

/** The request of one route, its params, query and body typed by the route's own schemas. */
export type RequestOf<R> = FastifyRequest<
  RouteGenericInterface,
  RawServerDefault,
  RawRequestDefaultExpression,
  { params: Part<R, 'params'>; querystring: Part<R, 'query'>; body: Part<R, 'body'> },
  TypeBoxTypeProvider
>;

/** Every api route, by operationId. */
export type ApiRoutes = { [R in ApiRoute as R['operationId']]: R };

/** Every api route's handler, by operationId. */
export type ApiHandlers = {
  [R in ApiRoute as R['operationId']]: (req: RequestOf<R>, reply: FastifyReply) => unknown;
};

/** The handlers one module provides. */
export type HandlersOf<K extends keyof ApiHandlers> = Pick<ApiHandlers, K>;
