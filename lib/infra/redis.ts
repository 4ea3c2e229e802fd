// Redis connection and the key names the service uses, in one place.
//
// One Redis (with replicas for failover), or a Redis Cluster: REDIS_URL
// `redis-cluster://host:port[,host:port...]` names some of the cluster's nodes (docs/operations.md
// "Redis Cluster"). In a cluster every command that names several keys must name keys of one slot,
// so the keys of an instance and the heartbeat due set they go with carry a hash tag: the instance's
// group (CLUSTER_GROUPS groups, by instance id), and each group's Lua calls stay in one slot. With
// one Redis the names have no tags and there is one group: the names are the ones the service has
// always used, so an existing deployment keeps its keys.
import { Redis, Cluster } from 'ioredis';

export { Redis };

/** Every Lua command of the project (luaCommand), defined on each connection createRedis makes. */
const scripts = new Map<string, string>();

/** Hash-tag groups of instance keys in a Redis Cluster (spread over the primaries by their slots). Fixed: changing it renames keys. */
export const CLUSTER_GROUPS = 16;

const CLUSTER_SCHEME = /^redis-cluster:\/\//;

/** The seed nodes and credentials of a `redis-cluster://[user:password@]host:port[,host:port...]` URL; null for any other URL. */
export function clusterNodes(url: string): { nodes: { host: string; port: number }[]; username?: string; password?: string } | null {
  if (!CLUSTER_SCHEME.test(url)) return null;
  let rest = url.replace(CLUSTER_SCHEME, '').replace(/\/.*$/, '');
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const auth = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = auth.indexOf(':');
    if (colon >= 0) {
      username = decodeURIComponent(auth.slice(0, colon)) || undefined;
      password = decodeURIComponent(auth.slice(colon + 1));
    } else password = decodeURIComponent(auth);
  }
  const nodes = rest
    .split(',')
    .filter(Boolean)
    .map((hp) => {
      const i = hp.lastIndexOf(':');
      return { host: i > 0 ? hp.slice(0, i) : hp, port: i > 0 ? Number(hp.slice(i + 1)) : 6379 };
    });
  return { nodes, username, password };
}

/**
 * A connection to REDIS_URL. For a cluster URL it is ioredis's Cluster client, typed as Redis: the
 * commands the service uses are the same, and what differs (multi-key commands, SCAN, keyspace
 * events, BullMQ's prefix) is handled where it is used, by `isCluster`.
 */
export function createRedis(url: string, opts: { lazyConnect?: boolean; bullmq?: boolean } = {}): Redis {
  const cluster = clusterNodes(url);
  // BullMQ requires null here for its blocking connections.
  const maxRetriesPerRequest = opts.bullmq ? null : 3;
  const redis: Redis = cluster
    ? (new Cluster(cluster.nodes, {
        lazyConnect: opts.lazyConnect ?? false,
        // Off: ioredis groups an automatic pipeline by the node of a command's first argument, which
        // for a Lua command is its key count, so a pipeline would mix nodes and fail ("All keys in
        // the pipeline should belong to the same slots allocation group"). Commands still go out
        // without waiting for each other's answers.
        enableAutoPipelining: false,
        // Every command goes to its slot's primary: a replica's copy may lag (a heartbeat key read
        // there could look absent).
        scaleReads: 'master',
        redisOptions: { maxRetriesPerRequest, username: cluster.username, password: cluster.password },
        // A primary that died: ioredis follows the MOVED answers to its promoted replica.
        clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
      }) as unknown as Redis)
    : new Redis(url, {
        lazyConnect: opts.lazyConnect ?? false,
        maxRetriesPerRequest,
        enableAutoPipelining: !opts.bullmq,
      });
  // Defined before any command: an automatic pipeline copies the connection's commands when it is
  // made, so one defined later is missing from a pipeline already pending in the same tick, and
  // ioredis then crashes the process ("results[i] is not iterable", seen when a worker started
  // under load in the rolling-restart test).
  for (const [name, lua] of scripts) redis.defineCommand(name, { lua });
  return redis;
}

/** Whether a connection is a Redis Cluster client. */
export const isCluster = (redis: { isCluster: boolean }): boolean => redis.isCluster === true;

/** The cluster client behind a connection createRedis made, or null. */
export const asCluster = (redis: Redis): Cluster | null => (isCluster(redis) ? (redis as unknown as Cluster) : null);

/**
 * The connections to the primaries that serve slots now, by the slot map the client routes every
 * command with (a node's role flag in ioredis's pool can lag behind it); the one Redis otherwise.
 */
export function primaries(redis: Redis): Redis[] {
  const cluster = asCluster(redis);
  if (!cluster) return [redis];
  const keys = new Set<string>();
  for (const owners of cluster.slots) if (owners?.[0]) keys.add(owners[0]);
  const byKey = new Map(cluster.nodes('all').map((n) => [`${n.options.host}:${n.options.port}`, n]));
  const out: Redis[] = [];
  for (const k of keys) {
    const n = byKey.get(k);
    if (n) out.push(n);
  }
  return out.length ? out : cluster.nodes('master');
}

/**
 * Every key matching `pattern`, in batches: SCAN on one Redis, on every primary of a cluster (each
 * holds its own slots). A batch may repeat a key (SCAN's guarantee); callers tolerate that.
 */
export async function* scanKeys(redis: Redis, pattern: string, count = 1000): AsyncGenerator<string[]> {
  for (const node of primaries(redis)) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', count);
      cursor = next;
      if (keys.length) yield keys;
    } while (cursor !== '0');
  }
}

/**
 * A Lua script as a command of `redis` (ioredis runs it by EVALSHA, loading it once). Declared at
 * module level, so every connection createRedis makes afterwards has it from the start; on any
 * other connection it is defined the first time it is called. Callers pass the number of keys,
 * then keys and args.
 */
export function luaCommand<R>(name: string, lua: string): (redis: Redis, numKeys: number, ...args: (string | number)[]) => Promise<R> {
  scripts.set(name, lua);
  return (redis, numKeys, ...args) => {
    // ioredis spreads a command's arguments into a call inside its automatic pipeline; one that
    // throws there (60,500 keys overflowed the stack) leaves the pipeline a callback short, and
    // ioredis then ends the process ("results[i] is not iterable"). Refused here instead, as a
    // rejected call: callers send at most LUA_MAX_ARGS (they chunk).
    if (args.length > LUA_MAX_ARGS) return Promise.reject(new Error(`${name}: ${args.length} arguments in one call (at most ${LUA_MAX_ARGS}; the caller must chunk)`));
    const r = redis as unknown as Record<string, (n: number, ...a: (string | number)[]) => Promise<R>>;
    if (typeof r[name] !== 'function') redis.defineCommand(name, { lua });
    return r[name]!(numKeys, ...args);
  };
}

/** The most arguments one Lua command takes (the largest caller: 1,000 written heartbeats, 11,005). */
export const LUA_MAX_ARGS = 20_000;

/** `items` in slices of at most `n`. */
export function chunks<T>(items: readonly T[], n: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += n) out.push(items.slice(i, i + n));
  return out;
}

/** The part of a key that picks its cluster slot: its first non-empty `{...}`, else the whole key. */
export function hashTagOf(key: string): string {
  const s = key.indexOf('{');
  if (s < 0) return key;
  const e = key.indexOf('}', s + 1);
  return e < 0 || e === s + 1 ? key : key.slice(s + 1, e);
}

/**
 * The indexes of `keys` in lists whose keys share a slot: one list on one Redis; in a cluster, one
 * per hash tag (so a multi-key command over each list is allowed).
 */
export function sameSlot(redis: { isCluster: boolean }, keys: readonly string[]): number[][] {
  if (!isCluster(redis)) return keys.length ? [keys.map((_, i) => i)] : [];
  const out = new Map<string, number[]>();
  keys.forEach((k, i) => {
    const t = hashTagOf(k);
    let a = out.get(t);
    if (!a) out.set(t, (a = []));
    a.push(i);
  });
  return [...out.values()];
}

/** MGET of keys in any slots: one MGET per slot's keys, the answers in the order of `keys`. */
export async function mgetAny(redis: Redis, keys: readonly string[]): Promise<(string | null)[]> {
  const out: (string | null)[] = new Array<string | null>(keys.length).fill(null);
  await Promise.all(
    sameSlot(redis, keys).map(async (idx) => {
      const got = await redis.mget(idx.map((i) => keys[i]!));
      idx.forEach((i, j) => (out[i] = got[j] ?? null));
    }),
  );
  return out;
}

/**
 * An instance's group (0 .. groups-1), from its id: the hash tag its keys carry in a cluster.
 * Instance ids are UUIDs, random in their first 8 hex digits; anything else still gets a group.
 */
export function groupOf(id: string, groups: number): number {
  if (groups <= 1) return 0;
  let h = Number.parseInt(id.slice(0, 8), 16);
  if (!Number.isFinite(h)) {
    h = 0;
    for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
  }
  return h % groups;
}

/** `items` by group of `idOf(item)`, in group order; groups without items are left out. */
export function byGroup<T>(items: readonly T[], groups: number, idOf: (x: T) => string): [number, T[]][] {
  if (groups <= 1) return items.length ? [[0, [...items]]] : [];
  const out = new Map<number, T[]>();
  for (const x of items) {
    const g = groupOf(idOf(x), groups);
    let a = out.get(g);
    if (!a) out.set(g, (a = []));
    a.push(x);
  }
  return [...out.entries()].sort((a, b) => a[0] - b[0]);
}

/**
 * The service's key names under `prefix`. `layout`: the connection they are used on (a cluster
 * gets hash tags; see the top of this file), or `{ isCluster: true }` to use the cluster's names
 * on one Redis (tests of the grouping).
 */
export function redisKeys(prefix: string, layout: { isCluster: boolean }) {
  const cluster = isCluster(layout);
  const groups = cluster ? CLUSTER_GROUPS : 1;
  const tag = (g: number) => (cluster ? `{g${g}}` : '');
  const hbPrefix = (g: number) => `${prefix}hb:${tag(g)}`;
  const hsPrefix = (g: number) => `${prefix}hs:${tag(g)}`;
  const duePerGroup = Array.from({ length: groups }, (_, g) => (cluster ? `${prefix}hbdue:${tag(g)}` : `${prefix}hbdue`));
  const silencePerGroup = Array.from({ length: groups }, (_, g) => (cluster ? `${prefix}hbdl:${tag(g)}` : `${prefix}hbdl`));
  return {
    cluster,
    /** Groups of instance keys: 1 on one Redis, CLUSTER_GROUPS in a cluster. */
    groups,
    groupOf: (instanceId: string) => groupOf(instanceId, groups),
    /** Present while the instance's heartbeat is fresh; PX = timeout from the receive time. */
    heartbeat: (instanceId: string) => `${hbPrefix(groupOf(instanceId, groups))}${instanceId}`,
    /** What every heartbeat key begins with (a cluster's keys then carry their group's tag: instanceOfHeartbeatKey). */
    heartbeatPrefix: `${prefix}hb:`,
    /** The heartbeat keys of group `g` begin with this. */
    heartbeatPrefixOf: hbPrefix,
    /** The instance id of a heartbeat key (null: not one). */
    instanceOfHeartbeatKey: (key: string): string | null => {
      if (!key.startsWith(`${prefix}hb:`)) return null;
      const rest = key.slice(prefix.length + 3);
      return cluster ? rest.replace(/^\{g\d+\}/, '') : rest;
    },
    /**
     * Hash: the newest heartbeat of an instance and what Postgres holds of it (lib/store/live-heartbeats.ts,
     * workers/heartbeat-state.ts); expires a while after the heartbeat key.
     */
    heartbeatState: (instanceId: string) => `${hsPrefix(groupOf(instanceId, groups))}${instanceId}`,
    /** What every state hash begins with. */
    heartbeatStatePrefix: `${prefix}hs:`,
    /** The state hashes of group `g` begin with this. */
    heartbeatStatePrefixOf: hsPrefix,
    /** The instance id of a state hash's key. */
    instanceOfStateKey: (key: string): string => {
      const rest = key.slice(prefix.length + 3);
      return cluster ? rest.replace(/^\{g\d+\}/, '') : rest;
    },
    /** Sorted set of group `g`: instance id -> when its newest heartbeat is due in Postgres (ms). */
    heartbeatDueOf: (g: number) => duePerGroup[g]!,
    /** The due set of an instance's group. */
    heartbeatDue: (instanceId: string) => duePerGroup[groupOf(instanceId, groups)]!,
    /** Every group's due set. */
    heartbeatDues: duePerGroup,
    /**
     * Sorted set of group `g`: instance id -> when its heartbeat key expires (ms), i.e. when its
     * silence would first change its colour: the sweep's candidates for silence
     * (workers/heartbeat-state.ts, workers/light-sweep.ts), which Postgres's times lag.
     */
    heartbeatSilenceOf: (g: number) => silencePerGroup[g]!,
    /** Every group's silence set. */
    heartbeatSilences: silencePerGroup,
    /** First receive time of a report sent with an Idempotency-Key (24 h). */
    idempotency: (reportId: string) => `${prefix}idem:${reportId}`,
    /** The body an Idempotency-Key was first used with (a hash, gateway/idempotency.ts; 24 h). */
    idempotencyBody: (reportId: string) => `${prefix}idemb:${reportId}`,
    /** Hash: instances per stored traffic-light colour, and `at` when counted (workers/light-census.ts). */
    lightCensus: `${prefix}light-census`,
    /** A host metric's client_metric_id, per customer and machine, once durably queued (gateway/metrics.ts; METRIC_DEDUP_TTL_S). */
    metric: (id: string) => `${prefix}metric:${tag(groupOf(id, groups))}${id}`,
    /** Wrong current passwords of a user's password changes (api/handlers/sessions.ts; LOGIN_WINDOW_S). */
    passwordChangeFailures: (userId: string) => `${prefix}pwchange:${userId}`,
    /** Password-reset mails asked for an address (its hash), within the hour (api/handlers/sessions.ts). */
    passwordResetRequests: (emailHash: string) => `${prefix}pwreset:${emailHash}`,
    /** The login guard's counters: `addr:`, `pair:`, `acct:`, `next:`, `dev:` (api/login-guard.ts). */
    login: (what: string) => `${prefix}login:${cluster ? '{login}' : ''}${what}`,
    /** Hash: the steps of `fleet restore` done for one backup (lib/store/backup.ts; a re-run skips them). */
    restoreProgress: (backupId: string) => `${prefix}restore:${backupId}`,
  };
}
