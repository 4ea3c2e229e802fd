// The usual alternative: the heartbeat endpoint as most teams would write it. Fastify, the bearer
// token checked against the same token table (one SELECT), and one INSERT per request into
// Postgres. Same paths, same bodies, same tokens as the gateway gets.
import Fastify from 'fastify';
import { createPool } from '../../lib/infra/postgres.js';
import { hashToken } from '../../lib/contract/ids.js';

const pool = createPool(process.env.DATABASE_URL!, 32, 'bench-fastify');
await pool.query(`CREATE TABLE IF NOT EXISTS bench_heartbeats (
  id bigserial PRIMARY KEY, customer text NOT NULL, machine text NOT NULL, software text NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(), body jsonb NOT NULL)`);

const app = Fastify({ logger: false });
app.post<{ Params: { customer: string; machine: string; software: string } }>(
  '/api/ingest/:customer/:machine/:software/heartbeat',
  async (req, reply) => {
    const token = (req.headers.authorization ?? '').replace(/^Bearer /i, '');
    const t = await pool.query(
      `SELECT c.slug FROM api_tokens t JOIN customers c ON c.id = t.customer_id WHERE t.token_hash = $1 AND t.revoked_at IS NULL`,
      [hashToken(token)],
    );
    if (t.rows[0]?.slug !== req.params.customer) return reply.code(403).send({ detail: 'invalid token' });
    await pool.query('INSERT INTO bench_heartbeats (customer, machine, software, body) VALUES ($1, $2, $3, $4)', [
      req.params.customer,
      req.params.machine,
      req.params.software,
      JSON.stringify(req.body ?? {}),
    ]);
    return { ok: true };
  },
);
const addr = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
process.stdout.write(JSON.stringify({ msg: 'listening', port: Number(new URL(addr).port) }) + '\n');
