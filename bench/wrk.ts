// Runs wrk (a load generator in its own process, from Debian) and reads its summary.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

export interface WrkResult {
  requestsPerS: number;
  requests: number;
  non2xx: number;
  socketErrors: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  seconds: number;
}

function ms(v: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(v.trim());
  if (!m) return NaN;
  const n = Number(m[1]);
  return m[2] === 'us' ? n / 1000 : m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
}

export async function wrk(opts: {
  url: string;
  targetsFile: string;
  bodyFile: string;
  seconds: number;
  connections?: number;
  threads?: number;
  root: string;
}): Promise<WrkResult> {
  const args = [
    '-t', String(opts.threads ?? 1),
    '-c', String(opts.connections ?? 64),
    '-d', `${opts.seconds}s`,
    '--latency',
    '-s', join(opts.root, 'bench', 'wrk', 'ingest.lua'),
    opts.url,
    '--', opts.targetsFile, opts.bodyFile,
  ];
  const out: string = await new Promise((resolve, reject) => {
    const p = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let s = '';
    p.stdout.on('data', (d) => (s += d));
    p.stderr.on('data', (d) => (s += d));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve(s) : reject(new Error(`wrk failed (${code}): ${s}`))));
  });
  const num = (re: RegExp) => Number(re.exec(out)?.[1] ?? 0);
  const reqs = /(\d+) requests in ([\d.]+)(s|m)/.exec(out);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    requestsPerS: num(/Requests\/sec:\s+([\d.]+)/),
    requests: Number(reqs?.[1] ?? 0),
    seconds: reqs ? Number(reqs[2]) * (reqs[3] === 'm' ? 60 : 1) : opts.seconds,
    non2xx: num(/Non-2xx or 3xx responses: (\d+)/),
    socketErrors: sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
    latencyP50Ms: ms(/\s50%\s+(\S+)/.exec(out)?.[1] ?? ''),
    latencyP99Ms: ms(/\s99%\s+(\S+)/.exec(out)?.[1] ?? ''),
  };
}
