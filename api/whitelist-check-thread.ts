// The worker thread of api/whitelist-check.ts: compiles a customer's rule set before and after a
// write (lib/domain/whitelist.ts, as the workers compile it) and answers the suffix chains.
import { parentPort } from 'node:worker_threads';
import { RuleSet, SUFFIX_CHAIN_MAX, type RuleRow } from '../lib/domain/whitelist.js';

parentPort!.on('message', (m: { id: number; rows: RuleRow[]; rule: RuleRow; replaces: string | null }) => {
  try {
    const revive = (r: RuleRow): RuleRow => ({ ...r, created_at: new Date(r.created_at) });
    const rows = m.rows.map(revive);
    const after = new RuleSet([...rows.filter((x) => x.id !== m.replaces), revive(m.rule)]);
    // Only a set over the limit needs the one before it (a write that does not lengthen the chain passes).
    const over = after.suffixChainDepth > SUFFIX_CHAIN_MAX;
    const before = over ? new RuleSet(rows).suffixChainDepth : 0;
    parentPort!.postMessage({ id: m.id, result: { after: after.suffixChainDepth, before, chain: over ? after.automaton.longestChain() : [] } });
  } catch (e) {
    parentPort!.postMessage({ id: m.id, error: (e as Error)?.message ?? String(e) });
  }
});
