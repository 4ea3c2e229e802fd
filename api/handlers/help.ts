// Help texts for a diagnostic code, per the instance's customer and software. Served at
// /api/instances/{id}/help and, as the spec names it, /instances/{id}/help (same handler).
import type { FastifyReply } from 'fastify';
import type { ApiDeps, HandlersOf, RequestOf, ApiRoutes } from '../types.js';
import { principal } from '../auth.js';
import { ownedInstanceSoftware } from '../../lib/store/instances.js';
import { listHelpTexts } from '../../lib/store/help-texts.js';

export function helpHandlers(d: ApiDeps): HandlersOf<'get_instance_help' | 'get_instance_help_short'> {
  async function getHelp(req: RequestOf<ApiRoutes['get_instance_help']>, reply: FastifyReply) {
    const p = principal(req);
    const { id } = req.params;
    const q = req.query;
    const lang = q.lang.toLowerCase();
    const { software } = await ownedInstanceSoftware(d.pool, p.customerId, id);
    const texts = await listHelpTexts(d.pool, p.customerId, software, q.code);
    const hit = texts.find((x) => x.lang === lang);
    if (!hit) {
      const available = texts.map((x) => x.lang);
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
