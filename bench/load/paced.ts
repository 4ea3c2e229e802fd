// A load generator at a fixed offered rate, in its own process (run by bench/run.ts with IPC;
// several of them share a rate that one Node process cannot offer alone).
// By default each request is a steady-state heartbeat (the same version every time) whose
// `uptime_seconds` carries a sequence number, so the bench can find the report in ClickHouse and
// measure the time from the 200 to the row being queryable; generator g of n sends the numbers
// g, g + n, g + 2n, … With a body file, every request carries that body instead.
// argv: <origin> <targets file> <rate per s> <seconds> <connections> [<first seq> <seq step>] [<body file>]
import { readFileSync } from 'node:fs';
import { Pool } from 'undici';

const [origin, targetsFile, rateS, secondsS, connS, firstS, stepS, bodyFile] = process.argv.slice(2);
const rate = Number(rateS);
const seconds = Number(secondsS);
const first = Number(firstS ?? 0);
const step = Number(stepS ?? 1);
const fixedBody = bodyFile ? readFileSync(bodyFile, 'utf8') : null;
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

async function one(n: number): Promise<void> {
  const seq = first + n * step;
  const [path, token] = targets[seq % targets.length]!;
  const sentMs = Date.now();
  inflight++;
  maxInflight = Math.max(maxInflight, inflight);
  try {
    const r = await pool.request({
      method: 'POST',
      path,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: fixedBody ?? `{"version":"e2e","uptime_seconds":${seq}}`,
    });
    await r.body.dump();
    const ackMs = Date.now();
    if (r.statusCode >= 200 && r.statusCode < 300) ok++;
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
