// Help texts for a diagnostic code, per the instance's customer and software. Served at
// /api/instances/{id}/help and, as the spec names it, /instances/{id}/help (same handler).
import type { FastifyReply } from 'fastify';
import type { ApiDeps, HandlersOf, RequestOf, ApiRoutes } from '../types.js';
import { principal } from '../auth.js';
import { ownedInstance } from '../ownership.js';

export function helpHandlers(d: ApiDeps): HandlersOf<'get_instance_help' | 'get_instance_help_short'> {
  async function getHelp(req: RequestOf<ApiRoutes['get_instance_help']>, reply: FastifyReply) {
    const p = principal(req);
    const { id } = req.params;
    const q = req.query;
    const lang = q.lang.toLowerCase();
    const { software } = await ownedInstance<{ software: string }>(d.pool, p.customerId, id, 'software');
    const r = await d.pool.query<{ lang: 'de' | 'en'; title: string; text: string; updated_at: Date }>(
      `SELECT lang, title, text, updated_at FROM help_texts WHERE customer_id = $1 AND software = $2 AND code = $3 ORDER BY lang`,
      [p.customerId, software, q.code],
    );
    const hit = r.rows.find((x) => x.lang === lang);
    if (!hit) {
      const available = r.rows.map((x) => x.lang);
      return reply.code(404).send({
        detail: available.length
          ? `no ${lang} help text for code ${q.code} of ${software}; available: ${available.join(', ')}`
          : `no help text for code ${q.code} of ${software}`,
        code: q.code,
        available,
      });
    }
    return { code: q.code, lang: hit.lang, software, title: hit.title, text: hit.text, updated_at: hit.updated_at.toISOString() };
  }
  return { get_instance_help: getHelp, get_instance_help_short: getHelp };
}
