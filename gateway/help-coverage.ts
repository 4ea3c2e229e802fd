// Which diagnostic codes have help texts, per customer and software, in memory: the diagnostics
// ingest answers 202 {ok, missing_help} without a query per request. One entry per
// (customer, software, code) with a bit per language (1 = de, 2 = en), kept by lib/infra/synced-map.ts:
// the codes whose texts changed since the last poll every CACHE_REFRESH_MS, everything every
// HELP_FULL_REFRESH_MS. A help text stored by a worker is therefore honoured by every gateway
// replica within CACHE_REFRESH_MS (1 s by default) plus one poll. The reads: lib/store/help-texts.ts.
import type { Pool } from '../lib/infra/postgres.js';
import { SyncedMap } from '../lib/infra/synced-map.js';
import type { DiagnosticItem, HelpItem } from '../lib/contract/schemas/ingest.js';
import { helpCoverageCopy, type HelpCoverageRow } from '../lib/store/help-texts.js';

export const LANGS = ['de', 'en'] as const;
export type Lang = (typeof LANGS)[number];
const BIT: Record<Lang, number> = { de: 1, en: 2 };
const ALL = 3;

const key = (customerId: string, software: string, code: number) => `${customerId}|${software}|${code}`;

export interface MissingHelp {
  code: number;
  langs: Lang[];
}

export class HelpCoverage extends SyncedMap<HelpCoverageRow, number> {

  constructor(pool: Pool, intervalMs: number, onError: (e: unknown) => void, fullEveryMs = 600_000) {
    super({
      pool,
      source: helpCoverageCopy,
      key: (r) => key(r.customer_id, r.software, r.code),
      value: (r) => r.mask,
      intervalMs,
      fullEveryMs,
      onError,
    });
  }

  /** The reported codes (each once, in first-seen order) that lack a DE or an EN text. */
  missing(customerId: string, software: string, items: Pick<DiagnosticItem, 'code'>[]): MissingHelp[] {
    const out: MissingHelp[] = [];
    let seen: Set<number> | null = null;
    for (const it of items) {
      const mask = this.get(key(customerId, software, it.code)) ?? 0;
      if (mask === ALL) continue;
      seen ??= new Set();
      if (seen.has(it.code)) continue;
      seen.add(it.code);
      out.push({ code: it.code, langs: LANGS.filter((l) => (mask & BIT[l]) === 0) });
    }
    return out;
  }
}

/** Distinct (code, lang) pairs of a help upload: what `stored` counts. */
export function distinctHelpItems(items: HelpItem[]): number {
  return new Set(items.map((i) => `${i.code}|${i.lang}`)).size;
}

/** An accepted request's status and body; `text`: the body as text when it is shared bytes (batch results embed it). */
export interface AcceptedAnswer {
  status: number;
  body: string | Uint8Array;
  text?: string;
}

/** The common answer, shared and pre-encoded (strings handed to uWS are converted per call). */
const OK_ANSWER: AcceptedAnswer = { status: 200, body: new TextEncoder().encode('{"ok":true}'), text: '{"ok":true}' };

/** The status and body of an accepted ingest request (after JetStream stored it). */

export function acceptedAnswer(
  kind: string,
  body: unknown,
  customerId: string,
  software: string,
  help: HelpCoverage,
): AcceptedAnswer {
  if (kind === 'diagnostics') {
    const missing = help.missing(customerId, software, (body as { items: DiagnosticItem[] }).items);
    if (missing.length > 0) return { status: 202, body: JSON.stringify({ ok: true, missing_help: missing }) };
  } else if (kind === 'help') {
    return { status: 200, body: `{"ok":true,"stored":${distinctHelpItems((body as { items: HelpItem[] }).items)}}` };
  }
  return OK_ANSWER;
}
