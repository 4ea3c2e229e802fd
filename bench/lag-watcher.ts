// The apply-lag watcher of the soaks, in a thread of its own: it polls the heartbeat keys of some
// instances in Redis every 20 ms and records, for each new expiry time, the moment it saw it minus
// the receive time the expiry names (a heartbeat's key expires at receive time + HEARTBEAT_TIMEOUT_S,
// and the worker sets it when it applies the heartbeat). In the load generator's own thread the
// watcher only saw a new expiry once the generator's synchronous work (building and sending bodies
// of megabytes) let it run, and that wait was counted as apply lag.
//
// Messages: in {ids: string[]} (the instances to watch; sent again when more exist), {stop: true};
// out, once stopped: {lags: number[]} (milliseconds).
import { parentPort, workerData } from 'node:worker_threads';
import { createRedis, redisKeys } from '../lib/infra/redis.js';

const { redisUrl, redisPrefix, timeoutMs } = workerData as { redisUrl: string; redisPrefix: string; timeoutMs: number };
const redis = createRedis(redisUrl);
const keys = redisKeys(redisPrefix, redis);
const lags: number[] = [];
const last = new Map<string, number>();
let ids: string[] = [];
let watching = true;
parentPort!.on('message', (m: { ids?: string[]; stop?: boolean }) => {
  if (m.ids) ids = m.ids;
  if (m.stop) watching = false;
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
while (watching) {
  if (ids.length > 0) {
    const pipe = redis.pipeline();
    for (const id of ids) pipe.call('PEXPIRETIME', keys.heartbeat(id));
    const res = (await pipe.exec()) ?? [];
    const seenAt = Date.now();
    ids.forEach((id, i) => {
      const exp = Number(res[i]?.[1]);
      const before = last.get(id);
      if (exp > 0 && before !== undefined && exp > before) lags.push(seenAt - (exp - timeoutMs));
      if (exp > 0) last.set(id, exp);
    });
  }
  await sleep(20);
}
await redis.quit();
parentPort!.postMessage({ lags });
