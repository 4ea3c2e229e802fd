// All of one customer's whitelist message patterns matched in one pass over a message, in time
// linear in the message and the number of rules (docs/operations.md "Whitelist matching").
//
// A pattern (lower-cased, by code point) is cut at its `*`s: the part before the first `*` is
// anchored at the start of the message, the part after the last `*` at its end; `?` runs cut those
// parts into literal pieces at fixed code-point offsets. The parts between two `*` are "floating
// segments": a literal text, perhaps with `?` runs at its edges (`*??disk?*`: skip two code points,
// then "disk", then one more); for globs the leftmost placement of each segment after the previous
// one is exact (greedy), so each segment is looked for once, from where the previous one ended.
//
// Every literal text of every pattern goes into one Aho–Corasick automaton over UTF-16 code units.
// One left-to-right pass over the message drives all rules at once:
// - an anchored piece expected to end at position e is checked there in O(1): the piece is a
//   suffix of what was read iff its node is an ancestor of the current state in the failure-link
//   tree (an Euler-tour interval test), and its start must be where the code-point offset says;
// - a rule waiting for its next floating segment sits in the waiting list of that segment's node
//   from the first position where an occurrence starting after the previous segment could end
//   (an event bucket per position), so no rule is examined at a position that cannot matter;
//   when the automaton reports the segment ending at e (the output links of the current state),
//   every rule waiting for it advances at once.
// A rule is decided when its checks are done; the pass stops as soon as no rule earlier (in rule
// order) than the best match so far is still open.
//
// Work per message of n code units against R rules (each unit counted in `work`): at most 2n
// automaton steps, D·n output-link visits (D: the customer's longest chain of floating texts that
// end in one another, "a" ⊂ "aa" ⊂ "aaa"; the api caps it at SUFFIX_CHAIN_MAX), n for the
// code-point maps, and per rule one set-up, one event per anchored piece, two per floating text,
// its deadline and its drop, together at most 2·(G + 1) + 2 with G wildcard runs (the api caps G
// at WILDCARD_GROUPS_MAX); RuleSet.match adds one per candidate rule. Hence
// work ≤ (3 + D)·n + (2G + 6)·R, which test/unit/whitelist.test.ts checks at the limits.
// Positions are UTF-16 indices; offsets from `?` are code points, mapped through two tables built
// once per message when it holds a surrogate.

/** A run of literal characters of an anchored part, `cpOff` code points into that part. */
export interface Piece {
  text: string;
  cpOff: number;
  cpLen: number;
  /** Trie node, set when the automaton is built. */
  node: number;
}

/** Between two `*`: skip `lead` code points, find `text` (leftmost), skip `trail` more. */
export interface Segment {
  text: string;
  lead: number;
  trail: number;
  cpLen: number;
  node: number;
}

export interface ParsedMessage {
  /** No `*`: the message has exactly `preCp` code points. */
  exact: boolean;
  preCp: number;
  pre: Piece[];
  sufCp: number;
  suf: Piece[];
  segs: Segment[];
  /** The fewest code points a matching message has. */
  minCp: number;
  /** Maximal runs of `*` and `?`. */
  groups: number;
  /** A `?` between two literal characters of a floating segment (`*a?b*`): not for the automaton. */
  innerQuestion: boolean;
  /** Only `*`s: matches everything. */
  matchAll: boolean;
}

const PAIR = /[\uD800-\uDBFF][\uDC00-\uDFFF]/g;
const SURROGATE_ANY = /[\uD800-\uDFFF]/;

/** Code points in s (a lone surrogate counts as one, as Array.from counts it). */
function cpLength(s: string): number {
  if (!SURROGATE_ANY.test(s)) return s.length;
  return s.length - (s.match(PAIR)?.length ?? 0);
}

// `*` and `?` are ASCII: never half of a surrogate pair, so cutting the UTF-16 string at them cuts
// it between code points.
function piecesOf(part: string): Piece[] {
  const out: Piece[] = [];
  let off = 0;
  for (const chunk of part.split('?')) {
    if (chunk) {
      const len = cpLength(chunk);
      out.push({ text: chunk, cpOff: off, cpLen: len, node: -1 });
      off += len;
    }
    off++; // the `?` after it
  }
  return out;
}

/** A message pattern, lower-cased as the messages are, cut into what the automaton checks. */
export function parseMessagePattern(pattern: string): ParsedMessage {
  const p = pattern.toLowerCase();
  const groups = p.match(/[*?]+/g)?.length ?? 0;
  const parts = p.split('*');
  if (parts.length === 1) {
    const len = cpLength(p);
    return { exact: true, preCp: len, pre: piecesOf(p), sufCp: 0, suf: [], segs: [], minCp: len, groups, innerQuestion: false, matchAll: false };
  }
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  const preCp = cpLength(first);
  const sufCp = cpLength(last);
  const segs: Segment[] = [];
  let innerQuestion = false;
  let minCp = preCp + sufCp;
  for (let k = 1; k < parts.length - 1; k++) {
    const part = parts[k]!;
    if (part.length === 0) continue; // `**`
    let lead = 0;
    while (lead < part.length && part.charCodeAt(lead) === 63) lead++;
    let trail = 0;
    if (lead < part.length) while (part.charCodeAt(part.length - 1 - trail) === 63) trail++;
    const inner = part.slice(lead, part.length - trail);
    if (inner.includes('?')) innerQuestion = true;
    const len = cpLength(inner);
    segs.push({ text: inner, lead, trail, cpLen: len, node: -1 });
    minCp += lead + len + trail;
  }
  const matchAll = first.length === 0 && last.length === 0 && segs.length === 0;
  return { exact: false, preCp, pre: piecesOf(first), sufCp, suf: piecesOf(last), segs, minCp, groups, innerQuestion, matchAll };
}

// Per-message scratch shared by every automaton (matching is synchronous): event buckets per
// position (pre: before the output links are followed, post: after), the events, the code-point maps.
const S = {
  preHead: new Int32Array(0),
  postHead: new Int32Array(0),
  c2u: new Int32Array(0),
  u2c: new Int32Array(0),
  evNext: new Int32Array(0),
  evRule: new Int32Array(0),
  evData: new Int32Array(0),
  evKind: new Uint8Array(0),
};

const EV_CHECK = 1; // an anchored piece must end here: evData = its node
const EV_ACT = 2; // a rule starts waiting for a floating text: evData = the text's word number
const EV_DEADLINE = 3; // the floating part must be done by here

const OPEN = 1;
const MATCHED = 2;
const DEAD = 3;

const SURROGATE = /[\uD800-\uDFFF]/;

export class MessageAutomaton {
  /** The longest chain of floating texts that are suffixes of one another (the n × D term). */
  readonly suffixChainDepth: number;
  readonly nodes: number;
  /** Work units done (see the header); a counter, read it before and after. */
  work = 0;

  // Trie: children in CSR order (sorted by code unit); the root's ASCII children dense.
  private readonly childStart: Int32Array;
  private readonly childLabel: Uint16Array;
  private readonly childNode: Int32Array;
  private readonly rootAscii: Int32Array;
  private readonly fail: Int32Array;
  /**
   * Output links by word number (a floating text): the first word ending at each node (the node's
   * own, else its nearest failure ancestor's), and each word's next shorter one (or -1).
   */
  private readonly chainWord: Int32Array;
  private readonly wordNext: Int32Array;
  private readonly wordNode: Int32Array;
  private readonly wordEdge: Uint8Array;
  private readonly wordLen: Int32Array;
  private readonly tin: Int32Array;
  private readonly tout: Int32Array;
  private readonly nodeParent: Int32Array;
  private readonly nodeLabel: Uint16Array;
  /** A node where the longest chain of floating texts ends. */
  private readonly deepest: number;

  // The rules, flat. Per rule: exact, code-point lengths, and ranges into the piece and segment arrays.
  private readonly rExact: Uint8Array;
  private readonly rPreCp: Int32Array;
  private readonly rSufCp: Int32Array;
  private readonly rMinCp: Int32Array;
  private readonly rPre: Int32Array; // pieces [rPre[i], rSuf[i]) are the prefix's
  private readonly rSuf: Int32Array; // pieces [rSuf[i], rPre[i + 1]) the suffix's
  private readonly rSeg: Int32Array; // segments [rSeg[i], rSeg[i + 1])
  private readonly rEv: Int32Array;
  private readonly pNode: Int32Array;
  private readonly pOff: Int32Array;
  private readonly pCp: Int32Array;
  private readonly pLen: Int32Array;
  private readonly sWord: Int32Array; // -1: only `?`
  private readonly sLead: Int32Array;
  private readonly sTrail: Int32Array;
  private readonly sCp: Int32Array;
  private readonly sLen: Int32Array;

  // Per rule, per message.
  private readonly state: Uint8Array;
  private readonly pending: Int32Array;
  private readonly floatDone: Uint8Array;
  private readonly cur: Int32Array;
  private readonly lpos: Int32Array;
  private readonly deadline: Int32Array;
  private readonly wnext: Int32Array;
  // Per word, per message: the rules waiting for it.
  private readonly whead: Int32Array;
  private readonly touched: Int32Array;
  private readonly touchedMark: Uint8Array;

  // The message in hand.
  private text = '';
  private n = 0;
  private N = 0;
  private hasMap = false;
  private list: Int32Array = new Int32Array(0);
  private count = 0;
  private best = 0;
  private open = 0;
  private waiting = 0;
  private evCount = 0;
  private touchedCount = 0;
  private w = 0;

  /** `rules[i]`: rule i's parsed message pattern, or null when it has none here. */
  constructor(rules: (ParsedMessage | null)[]) {
    const R = rules.length;
    const ids = new Map<string, boolean>(); // text -> is a floating text
    for (const m of rules) {
      if (!m) continue;
      for (const p of m.pre) if (!ids.has(p.text)) ids.set(p.text, false);
      for (const p of m.suf) if (!ids.has(p.text)) ids.set(p.text, false);
      for (const s of m.segs) if (s.text) ids.set(s.text, true);
    }
    // The trie from the sorted texts: each text shares its longest common prefix with the previous
    // one, so nodes come in preorder and each node's children in code-unit order.
    const sorted = [...ids.keys()].sort();
    let total = 1;
    for (const t of sorted) total += t.length;
    const parent = new Int32Array(total);
    const label = new Uint16Array(total);
    parent[0] = -1;
    let nodes = 1;
    const nodeOf = new Map<string, number>();
    const path = [0];
    let prev = '';
    for (const s of sorted) {
      let lcp = 0;
      const lim = Math.min(prev.length, s.length);
      while (lcp < lim && prev.charCodeAt(lcp) === s.charCodeAt(lcp)) lcp++;
      path.length = lcp + 1;
      for (let k = lcp; k < s.length; k++) {
        parent[nodes] = path[k]!;
        label[nodes] = s.charCodeAt(k);
        path.push(nodes++);
      }
      nodeOf.set(s, path[s.length]!);
      prev = s;
    }
    const n = nodes;
    this.nodes = n;
    const childStart = new Int32Array(n + 1);
    for (let v = 1; v < n; v++) childStart[parent[v]! + 1]!++;
    for (let v = 0; v < n; v++) childStart[v + 1]! += childStart[v]!;
    const fill = childStart.slice(0, n);
    const childLabel = new Uint16Array(Math.max(0, n - 1));
    const childNode = new Int32Array(Math.max(0, n - 1));
    for (let v = 1; v < n; v++) {
      const at = fill[parent[v]!]!++;
      childLabel[at] = label[v]!;
      childNode[at] = v;
    }
    this.childStart = childStart;
    this.childLabel = childLabel;
    this.childNode = childNode;
    this.rootAscii = new Int32Array(128).fill(-1);
    for (let j = childStart[0]!; j < childStart[1]!; j++) if (childLabel[j]! < 128) this.rootAscii[childLabel[j]!] = childNode[j]!;

    const wordOf = new Int32Array(n).fill(-1);
    const edge: number[] = [];
    const lens: number[] = [];
    for (const [text, floating] of ids) {
      if (!floating) continue;
      wordOf[nodeOf.get(text)!] = lens.length;
      lens.push(text.length);
      const a = text.charCodeAt(0);
      const z = text.charCodeAt(text.length - 1);
      // A text that starts with a low surrogate or ends with a high one could match half a pair.
      edge.push((a >= 0xdc00 && a <= 0xdfff) || (z >= 0xd800 && z <= 0xdbff) ? 1 : 0);
    }
    const words = lens.length;
    this.wordEdge = Uint8Array.from(edge);
    this.wordLen = Int32Array.from(lens);

    // Failure links (breadth first), output links to the nearest floating text, chain depth.
    const fail = new Int32Array(n);
    const dictLink = new Int32Array(n).fill(-1);
    const chain = new Int32Array(n);
    const order = new Int32Array(n);
    let head = 0;
    let tail = 1;
    let depthMax = 0;
    let deepest = 0;
    while (head < tail) {
      const u = order[head++]!;
      for (let j = childStart[u]!; j < childStart[u + 1]!; j++) {
        const v = childNode[j]!;
        const c = childLabel[j]!;
        let f = 0;
        if (u !== 0) {
          f = fail[u]!;
          for (;;) {
            const g = this.step(f, c);
            if (g >= 0) {
              f = g;
              break;
            }
            if (f === 0) break;
            f = fail[f]!;
          }
        }
        fail[v] = f;
        dictLink[v] = wordOf[f]! >= 0 ? f : dictLink[f]!;
        chain[v] = (wordOf[v]! >= 0 ? 1 : 0) + chain[f]!;
        if (chain[v]! > depthMax) {
          depthMax = chain[v]!;
          deepest = v;
        }
        order[tail++] = v;
      }
    }
    this.fail = fail;
    // (Plain loops: TypedArray.from with a function is slow for half a million nodes.)
    const chainWord = new Int32Array(n);
    const wordNext = new Int32Array(words);
    const wordNode = new Int32Array(words);
    for (let v = 0; v < n; v++) {
      const x = wordOf[v]! >= 0 ? v : dictLink[v]!;
      chainWord[v] = x >= 0 ? wordOf[x]! : -1;
      if (wordOf[v]! >= 0) {
        wordNext[wordOf[v]!] = dictLink[v]! >= 0 ? wordOf[dictLink[v]!]! : -1;
        wordNode[wordOf[v]!] = v;
      }
    }
    this.chainWord = chainWord;
    this.wordNext = wordNext;
    this.wordNode = wordNode;
    this.suffixChainDepth = depthMax;
    this.deepest = deepest;
    this.nodeParent = parent.subarray(0, n);
    this.nodeLabel = label.subarray(0, n);

    // Euler tour of the failure-link tree: u's text is a suffix of v's iff tin[u] <= tin[v] < tout[u].
    const fcStart = new Int32Array(n + 1);
    for (let v = 1; v < n; v++) fcStart[fail[v]! + 1]!++;
    for (let v = 0; v < n; v++) fcStart[v + 1]! += fcStart[v]!;
    const fcFill = fcStart.slice(0, n);
    const fcNode = new Int32Array(Math.max(0, n - 1));
    for (let v = 1; v < n; v++) fcNode[fcFill[fail[v]!]!++] = v;
    const tin = new Int32Array(n);
    const tout = new Int32Array(n);
    const stack = new Int32Array(n);
    const iter = new Int32Array(n);
    let sp = 0;
    let clock = 0;
    stack[sp++] = 0;
    tin[0] = clock++;
    iter[0] = fcStart[0]!;
    while (sp > 0) {
      const u = stack[sp - 1]!;
      if (iter[u]! < fcStart[u + 1]!) {
        const v = fcNode[iter[u]!++]!;
        tin[v] = clock++;
        iter[v] = fcStart[v]!;
        stack[sp++] = v;
      } else {
        tout[u] = clock;
        sp--;
      }
    }
    this.tin = tin;
    this.tout = tout;

    // The rules, flat.
    this.rExact = new Uint8Array(R);
    this.rPreCp = new Int32Array(R);
    this.rSufCp = new Int32Array(R);
    this.rMinCp = new Int32Array(R);
    this.rPre = new Int32Array(R + 1);
    this.rSuf = new Int32Array(R);
    this.rSeg = new Int32Array(R + 1);
    this.rEv = new Int32Array(R);
    const pieces: Piece[] = [];
    const segs: Segment[] = [];
    for (let i = 0; i < R; i++) {
      const m = rules[i];
      this.rPre[i] = pieces.length;
      this.rSeg[i] = segs.length;
      if (m) {
        this.rExact[i] = m.exact ? 1 : 0;
        this.rPreCp[i] = m.preCp;
        this.rSufCp[i] = m.sufCp;
        this.rMinCp[i] = m.minCp;
        pieces.push(...m.pre);
        this.rSuf[i] = pieces.length;
        pieces.push(...m.suf);
        segs.push(...m.segs);
        this.rEv[i] = m.pre.length + m.suf.length + m.segs.length + 1;
      } else this.rSuf[i] = pieces.length;
    }
    this.rPre[R] = pieces.length;
    this.rSeg[R] = segs.length;
    this.pNode = Int32Array.from(pieces, (p) => nodeOf.get(p.text)!);
    this.pOff = Int32Array.from(pieces, (p) => p.cpOff);
    this.pCp = Int32Array.from(pieces, (p) => p.cpLen);
    this.pLen = Int32Array.from(pieces, (p) => p.text.length);
    this.sWord = Int32Array.from(segs, (s) => (s.text ? wordOf[nodeOf.get(s.text)!]! : -1));
    this.sLead = Int32Array.from(segs, (s) => s.lead);
    this.sTrail = Int32Array.from(segs, (s) => s.trail);
    this.sCp = Int32Array.from(segs, (s) => s.cpLen);
    this.sLen = Int32Array.from(segs, (s) => s.text.length);

    this.state = new Uint8Array(R);
    this.pending = new Int32Array(R);
    this.floatDone = new Uint8Array(R);
    this.cur = new Int32Array(R);
    this.lpos = new Int32Array(R);
    this.deadline = new Int32Array(R);
    this.wnext = new Int32Array(R);
    this.whead = new Int32Array(words).fill(-1);
    this.touched = new Int32Array(words);
    this.touchedMark = new Uint8Array(words);
  }

  /** The floating texts of the longest chain, longest first ("aaa", "aa", "a"). */
  longestChain(): string[] {
    const out: string[] = [];
    for (let w = this.chainWord[this.deepest]!; w >= 0; w = this.wordNext[w]!) {
      const units: number[] = [];
      for (let v = this.wordNode[w]!; v > 0; v = this.nodeParent[v]!) units.push(this.nodeLabel[v]!);
      out.push(String.fromCharCode(...units.reverse()));
    }
    return out;
  }

  /** The child of u on code unit c, or -1. */
  private step(u: number, c: number): number {
    if (u === 0 && c < 128) return this.rootAscii[c]!;
    let a = this.childStart[u]!;
    let b = this.childStart[u + 1]!;
    const labels = this.childLabel;
    if (b - a <= 8) {
      for (; a < b; a++) {
        const l = labels[a]!;
        if (l === c) return this.childNode[a]!;
        if (l > c) return -1;
      }
      return -1;
    }
    while (a < b) {
      const mid = (a + b) >>> 1;
      const l = labels[mid]!;
      if (l === c) return this.childNode[mid]!;
      if (l < c) a = mid + 1;
      else b = mid;
    }
    return -1;
  }

  private U(cp: number): number {
    return this.hasMap ? S.c2u[cp]! : cp;
  }

  private C(u: number): number {
    return this.hasMap ? S.u2c[u]! : u;
  }

  private push(pos: number, post: boolean, kind: number, r: number, data: number): void {
    const e = this.evCount++;
    S.evKind[e] = kind;
    S.evRule[e] = r;
    S.evData[e] = data;
    const heads = post ? S.postHead : S.preHead;
    S.evNext[e] = heads[pos]!;
    heads[pos] = e;
  }

  private die(r: number): void {
    if (this.state[r] === OPEN) {
      this.state[r] = DEAD;
      this.open--;
    }
  }

  private matched(r: number): void {
    const { state, list } = this;
    state[r] = MATCHED;
    this.open--;
    // Every open rule after r no longer matters.
    for (let j = this.lpos[r]! + 1; j < this.count && list[j]! < this.best; j++) {
      this.w++;
      if (state[list[j]!] === OPEN) {
        state[list[j]!] = DEAD;
        this.open--;
      }
    }
    this.best = r;
  }

  private checkDone(r: number): void {
    if (this.state[r] === OPEN && this.pending[r] === 0 && this.floatDone[r] === 1) this.matched(r);
  }

  /** Rule r has placed its floating segments before `si`; the next may start at code point cp. */
  private advance(r: number, cp: number, si: number): void {
    const S_ = this.N - this.rSufCp[r]!;
    const end = this.rSeg[r + 1]!;
    for (; si < end; si++) {
      cp += this.sLead[si]!;
      const word = this.sWord[si]!;
      if (word < 0) {
        if (cp > S_) return this.die(r);
        continue;
      }
      if (cp + this.sCp[si]! + this.sTrail[si]! > S_) return this.die(r);
      const t = this.U(cp) + this.sLen[si]!;
      if (t > this.deadline[r]!) return this.die(r);
      this.cur[r] = si;
      this.push(t, false, EV_ACT, r, word);
      return;
    }
    if (cp > S_) return this.die(r);
    this.floatDone[r] = 1;
    this.checkDone(r);
  }

  /** Registers anchored piece k of rule r at code point cpStart; false if it cannot fit. */
  private check(r: number, k: number, cpStart: number): boolean {
    const a = this.U(cpStart);
    const e = this.U(cpStart + this.pCp[k]!);
    if (e - a !== this.pLen[k]!) return false;
    this.pending[r]!++;
    this.push(e, false, EV_CHECK, r, this.pNode[k]!);
    return true;
  }

  private setup(r: number): void {
    const N = this.N;
    this.state[r] = OPEN;
    this.open++;
    this.pending[r] = 0;
    this.floatDone[r] = 0;
    this.w++;
    const exact = this.rExact[r] === 1;
    if (exact ? N !== this.rPreCp[r] : N < this.rMinCp[r]!) return this.die(r);
    const sufAt = N - this.rSufCp[r]!;
    for (let k = this.rPre[r]!; k < this.rSuf[r]!; k++) if (!this.check(r, k, this.pOff[k]!)) return this.die(r);
    for (let k = this.rSuf[r]!; k < this.rPre[r + 1]!; k++) if (!this.check(r, k, sufAt + this.pOff[k]!)) return this.die(r);
    if (this.rSeg[r] === this.rSeg[r + 1]) {
      this.floatDone[r] = 1;
      return this.checkDone(r);
    }
    this.deadline[r] = this.U(sufAt);
    this.push(this.deadline[r]!, true, EV_DEADLINE, r, 0);
    this.advance(r, this.rPreCp[r]!, this.rSeg[r]!);
  }

  private runPre(e: number, s: number): void {
    const { state, tin, tout, whead, wnext, touchedMark, touched } = this;
    for (let ev = S.preHead[e]!; ev >= 0; ev = S.evNext[ev]!) {
      const r = S.evRule[ev]!;
      this.w++;
      if (state[r] !== OPEN) continue;
      const data = S.evData[ev]!;
      if (S.evKind[ev] === EV_CHECK) {
        if (tin[data]! <= tin[s]! && tin[s]! < tout[data]!) {
          this.pending[r]!--;
          this.checkDone(r);
        } else this.die(r);
      } else {
        if (touchedMark[data] === 0) {
          touchedMark[data] = 1;
          touched[this.touchedCount++] = data;
        }
        wnext[r] = whead[data]!;
        whead[data] = r;
        this.waiting++;
      }
    }
  }

  private boundary(p: number): boolean {
    const t = this.text;
    if (p <= 0 || p >= this.n) return true;
    const a = t.charCodeAt(p - 1);
    const b = t.charCodeAt(p);
    return !(a >= 0xd800 && a <= 0xdbff && b >= 0xdc00 && b <= 0xdfff);
  }

  /** Floating text `word` ends at e: every rule waiting for it advances. */
  private fire(word: number, e: number): void {
    if (this.wordEdge[word] === 1 && !(this.boundary(e) && this.boundary(e - this.wordLen[word]!))) return;
    const { whead, wnext, state, cur } = this;
    let h = whead[word]!;
    whead[word] = -1;
    const cp = this.C(e);
    while (h >= 0) {
      const r = h;
      h = wnext[r]!;
      this.waiting--;
      this.w++;
      if (state[r] !== OPEN) continue;
      const si = cur[r]!;
      this.advance(r, cp + this.sTrail[si]!, si + 1);
    }
  }

  private runPost(e: number): void {
    for (let ev = S.postHead[e]!; ev >= 0; ev = S.evNext[ev]!) {
      const r = S.evRule[ev]!;
      this.w++;
      if (this.state[r] === OPEN && this.floatDone[r] === 0) this.die(r);
    }
  }

  /**
   * The lowest rule index among `list[0..count)` (ascending, every one below `best`, each with a
   * pattern in this automaton) whose pattern matches `text` (already lower-cased), or `best`.
   */
  match(text: string, list: Int32Array, count: number, best: number): number {
    const n = text.length;
    this.text = text;
    this.n = n;
    this.w = 0;
    // Code-point maps, only when the text has a surrogate (else a position is its code point).
    this.N = n;
    this.hasMap = false;
    if (SURROGATE.test(text)) {
      this.hasMap = true;
      if (S.c2u.length < n + 1) {
        S.c2u = new Int32Array(n + 1);
        S.u2c = new Int32Array(n + 1);
      }
      const { c2u, u2c } = S;
      let k = 0;
      for (let i = 0; i < n; i++) {
        u2c[i] = k;
        c2u[k] = i;
        const c = text.charCodeAt(i);
        if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) {
          const d = text.charCodeAt(i + 1);
          if (d >= 0xdc00 && d <= 0xdfff) u2c[++i] = -1;
        }
        k++;
      }
      u2c[n] = k;
      c2u[k] = n;
      this.N = k;
      this.w += n;
    }
    if (S.preHead.length < n + 1) {
      S.preHead = new Int32Array(n + 1);
      S.postHead = new Int32Array(n + 1);
    }
    const preHead = S.preHead;
    const postHead = S.postHead;
    preHead.fill(-1, 0, n + 1);
    postHead.fill(-1, 0, n + 1);
    let evCap = 0;
    for (let j = 0; j < count; j++) evCap += this.rEv[list[j]!]!;
    if (S.evNext.length < evCap) {
      const size = Math.max(evCap, S.evNext.length * 2);
      S.evNext = new Int32Array(size);
      S.evRule = new Int32Array(size);
      S.evData = new Int32Array(size);
      S.evKind = new Uint8Array(size);
    }
    this.evCount = 0;
    this.list = list;
    this.count = count;
    this.best = best;
    this.open = 0;
    this.waiting = 0;
    this.touchedCount = 0;
    for (let j = 0; j < count; j++) {
      this.state[list[j]!] = 0;
      this.lpos[list[j]!] = j;
    }
    for (let j = 0; j < count && list[j]! < this.best; j++) this.setup(list[j]!);

    if (this.open > 0) {
      if (preHead[0]! >= 0) this.runPre(0, 0);
      if (postHead[0]! >= 0) this.runPost(0);
    }
    const { childStart, childLabel, childNode, rootAscii, fail, chainWord, wordNext, whead } = this;
    let s = 0;
    let steps = 0;
    let visits = 0;
    for (let i = 0; i < n && this.open > 0; i++) {
      const c = text.charCodeAt(i);
      // One automaton step: follow failure links until a child on c (or the root).
      for (;;) {
        steps++;
        let g = -1;
        if (s === 0 && c < 128) g = rootAscii[c]!;
        else {
          let a = childStart[s]!;
          let b = childStart[s + 1]!;
          if (b - a <= 8) {
            for (; a < b; a++) {
              const l = childLabel[a]!;
              if (l >= c) {
                if (l === c) g = childNode[a]!;
                break;
              }
            }
          } else {
            while (a < b) {
              const mid = (a + b) >>> 1;
              const l = childLabel[mid]!;
              if (l === c) {
                g = childNode[mid]!;
                break;
              }
              if (l < c) a = mid + 1;
              else b = mid;
            }
          }
        }
        if (g >= 0) {
          s = g;
          break;
        }
        if (s === 0) break;
        s = fail[s]!;
      }
      const e = i + 1;
      if (preHead[e]! >= 0) this.runPre(e, s);
      // The output walk: every floating text ending here (at most the suffix-chain depth of them).
      if (this.waiting > 0 && this.open > 0) {
        for (let w = chainWord[s]!; w >= 0; w = wordNext[w]!) {
          visits++;
          if (whead[w]! >= 0) this.fire(w, e);
        }
      }
      if (postHead[e]! >= 0) this.runPost(e);
    }
    for (let j = 0; j < this.touchedCount; j++) {
      this.whead[this.touched[j]!] = -1;
      this.touchedMark[this.touched[j]!] = 0;
    }
    this.work += this.w + steps + visits;
    this.text = '';
    return this.best;
  }
}
