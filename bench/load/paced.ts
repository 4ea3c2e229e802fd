// A load generator at a fixed offered rate, in its own process (run by bench/run.ts with IPC).
// Each request is a heartbeat whose `version` carries a sequence number, so the bench can find the
// report in ClickHouse and measure the time from the 200 to the row being queryable.
// argv: <origin> <targets file> <rate per s> <seconds> <connections>
import { readFileSync } from 'node:fs';
import { Pool } from 'undici';

const [origin, targetsFile, rateS, secondsS, connS] = process.argv.slice(2);
const rate = Number(rateS);
const seconds = Number(secondsS);
const targets = readFileSync(targetsFile!, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => l.split('\t') as [string, string]);
const pool = new Pool(origin!, { connections: Number(connS ?? 64), pipelining: 1, keepAliveTimeout: 30_000 });

type Ack = [seq: number, sentMs: number, ackMs: number, status: number];
let acks: Ack[] = [];
let sent = 0;
let ok = 0;
let failed = 0;
let inflight = 0;
let maxInflight = 0;

async function one(seq: number): Promise<void> {
  const [path, token] = targets[seq % targets.length]!;
  const sentMs = Date.now();
  inflight++;
  maxInflight = Math.max(maxInflight, inflight);
  try {
    const r = await pool.request({
      method: 'POST',
      path,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: `{"version":"e2e-${seq}"}`,
    });
    await r.body.dump();
    const ackMs = Date.now();
    if (r.statusCode === 200) ok++;
    else failed++;
    acks.push([seq, sentMs, ackMs, r.statusCode]);
  } catch {
    failed++;
    acks.push([seq, sentMs, Date.now(), 0]);
  } finally {
    inflight--;
  }
}

const started = Date.now();
const total = Math.round(rate * seconds);
const flush = setInterval(() => {
  if (acks.length) {
    process.send!({ type: 'acks', acks });
    acks = [];
  }
}, 100);
await new Promise<void>((resolve) => {
  const tick = setInterval(() => {
    const due = Math.min(total, Math.floor(((Date.now() - started) * rate) / 1000));
    while (sent < due) void one(sent++);
    if (sent >= total) {
      clearInterval(tick);
      resolve();
    }
  }, 2);
});
while (inflight > 0) await new Promise((r) => setTimeout(r, 10));
clearInterval(flush);
process.send!({ type: 'acks', acks });
process.send!({ type: 'done', sent, ok, failed, seconds: (Date.now() - started) / 1000, maxInflight });
await pool.close();
process.disconnect();
