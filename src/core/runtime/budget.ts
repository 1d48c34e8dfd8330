import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { BudgetCaps, RuntimeConfig } from '../config/runtime-schema.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import type { BudgetRows } from '../store/budget-rows.js';
import type { StoredBudget } from '../store/stored-budget.js';
import { type ConversationMessage, estimateTokens } from './model-adapter.js';
import type { CallResult } from './model-call.js';
import { costOf, usdDecimal } from './pricing.js';

/** Caps set on a session: its own spend, and (for a session no one delegated to) its whole tree's. */
export interface SessionBudget {
  readonly session?: Partial<BudgetCaps>;
  readonly tree?: Partial<BudgetCaps>;
}

/** Percentages of a USD cap at which `quota.alert` is emitted, once each per cap value. */
export const ALERT_THRESHOLDS_PCT = [80, 100] as const;

type Scope = 'session' | 'tree';
type Measure = 'usd' | 'tokens';

/** A turn held before its next model call: which cap, how much is spent, since when. */
export interface BudgetPause {
  readonly session_id: string;
  readonly turn_id: string;
  readonly scope: Scope;
  /** The session whose cap it is: the paused one (`session`) or the root of its delegation tree. */
  readonly budget_session_id: string;
  readonly measure: Measure;
  readonly spent: number;
  readonly cap: number;
  readonly paused_at: string;
}

export interface BudgetView {
  readonly session: { readonly caps: BudgetCaps; readonly spent_usd: number; readonly spent_tokens: number };
  /** The tree this session belongs to (its root's caps and the spend of every session in it). */
  readonly tree: {
    readonly root_session_id: string;
    readonly caps: BudgetCaps;
    readonly spent_usd: number;
    readonly spent_tokens: number;
  };
  /** Turns of the tree held at a cap now; empty when none is. */
  readonly paused: readonly BudgetPause[];
}

interface Spend {
  usd: number;
  tokens: number;
}

interface Held {
  readonly pause: BudgetPause;
  readonly wake: () => void;
}

const NO_CAPS: BudgetCaps = { usd: null, tokens: null };

/**
 * Budgets that pause (issue 31, docs/configuration.md `runtime.budgets`): per-session and
 * per-delegation-tree caps on cost and tokens. A turn whose session or tree has reached a cap waits
 * before its next model call (the call in flight is never cut) until a cap is raised, or the turn is
 * cancelled (the session ended, its timeout, a cancel). `quota.alert` (USD caps) at 80 % and 100 %.
 * Caps set by request and every charge are written to the session's row as they happen; the maps here
 * are filled from the rows on first use, so a restarted or taking-over server pauses at the same caps.
 */
export class Budgets {
  private readonly caps = new Map<string, { session: BudgetCaps; tree: BudgetCaps }>();
  private readonly own = new Map<string, Spend>();
  private readonly trees = new Map<string, Spend>();
  /** Alerts already emitted, by `<budget session>:<scope>:<cap>:<pct>`: a raised cap alerts anew. */
  private readonly alerted = new Set<string>();
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly bus: EventBus,
    private readonly config: RuntimeConfig,
    /** Knows the session a worker was delegated from (null for a session no one delegated to). */
    private readonly lineage: { parentOf(sessionId: string): string | null },
    private readonly logger: Logger,
    private readonly rows: BudgetRows,
  ) {}

  /** Sets caps (a field left out keeps its value; null lifts a cap) and wakes the turns they free. */
  set(sessionId: string, budget: SessionBudget): BudgetView {
    const current = this.capsOf(sessionId);
    const caps = {
      session: { ...current.session, ...definedOf(budget.session) },
      tree: { ...current.tree, ...definedOf(budget.tree) },
    };
    this.rows.setCaps(sessionId, caps);
    this.caps.set(sessionId, caps);
    for (const [turnId, held] of this.held) {
      if (this.blocking(held.pause.session_id) === null) {
        this.held.delete(turnId);
        held.wake();
      }
    }
    return this.view(sessionId);
  }

  /**
   * Counts a model call as the provider bills it: a completed call by its usage (cached and cache-write
   * tokens at their own prices, pricing.ts); a call cut short or failed mid-stream by an estimate of
   * the prompt it sent and the text it streamed, which providers bill too although no usage came back.
   */
  charge(sessionId: string, model: string, call: CallResult, conversation: readonly ConversationMessage[]) {
    let usd = call.costUsd;
    let tokens =
      call.usage.input_tokens +
      call.usage.output_tokens +
      call.usage.cached_input_tokens +
      call.usage.cache_creation_input_tokens;
    if (call.kind !== 'completed' && tokens === 0 && call.text !== '') {
      const usage = {
        input_tokens: estimateTokens(conversation),
        output_tokens: Math.ceil(call.text.length / 4),
        cached_input_tokens: 0,
        cache_creation_input_tokens: 0,
      };
      tokens = usage.input_tokens + usage.output_tokens;
      usd = costOf(model, usage, this.config);
    }
    if (usd === 0 && tokens === 0) return;
    const root = this.rootOf(sessionId);
    // Both read from the rows before the row changes, so neither counts this call twice.
    const own = this.spendOf(this.own, sessionId);
    const tree = this.spendOf(this.trees, root);
    this.rows.addSpend(sessionId, { usd, tokens });
    add(own, usd, tokens);
    add(tree, usd, tokens);
    this.alert(sessionId, 'session', this.spendOf(this.own, sessionId).usd);
    this.alert(root, 'tree', this.spendOf(this.trees, root).usd);
  }

  /**
   * Resolves once the session's turn may make its next model call: at once when no cap is reached,
   * else when one is raised enough, or when `signal` aborts (the caller then ends the turn cancelled).
   */
  async beforeModelCall(sessionId: string, turnId: string, signal: AbortSignal): Promise<void> {
    for (;;) {
      const blocking = this.blocking(sessionId);
      if (blocking === null || signal.aborted) return;
      const pause: BudgetPause = {
        session_id: sessionId,
        turn_id: turnId,
        ...blocking,
        paused_at: microsToIso(nowMicros()),
      };
      this.logger.info({ ...pause }, 'turn paused at its budget; raise it to go on');
      await new Promise<void>((resolve) => {
        const wake = () => {
          signal.removeEventListener('abort', wake);
          this.held.delete(turnId);
          resolve();
        };
        this.held.set(turnId, { pause, wake });
        signal.addEventListener('abort', wake, { once: true });
      });
    }
  }

  /** The session's caps and spend, its tree's, and the turns of the tree held now. */
  view(sessionId: string): BudgetView {
    const root = this.rootOf(sessionId);
    const own = this.spendOf(this.own, sessionId);
    const tree = this.spendOf(this.trees, root);
    return {
      session: { caps: this.capsOf(sessionId).session, spent_usd: round(own.usd), spent_tokens: own.tokens },
      tree: {
        root_session_id: root,
        caps: this.capsOf(root).tree,
        spent_usd: round(tree.usd),
        spent_tokens: tree.tokens,
      },
      paused: [...this.held.values()].map((h) => h.pause).filter((p) => this.rootOf(p.session_id) === root),
    };
  }

  /** Whether a session has a cap of its own or in its tree (the snapshot shows budgets only then). */
  hasCaps(sessionId: string): boolean {
    const { session } = this.capsOf(sessionId);
    const { tree } = this.capsOf(this.rootOf(sessionId));
    return [session.usd, session.tokens, tree.usd, tree.tokens].some((cap) => cap !== null);
  }

  /**
   * Forgets a session that ended (its turns are over: none is held). A worker's spend stays in its
   * tree's sum, which goes with the root.
   */
  forget(sessionId: string): void {
    this.caps.delete(sessionId);
    this.own.delete(sessionId);
    if (this.lineage.parentOf(sessionId) === null) this.trees.delete(sessionId);
    for (const key of this.alerted) if (key.startsWith(`${sessionId}:`)) this.alerted.delete(key);
  }

  private blocking(sessionId: string): Omit<BudgetPause, 'session_id' | 'turn_id' | 'paused_at'> | null {
    const root = this.rootOf(sessionId);
    const checks: [Scope, string, BudgetCaps, Spend][] = [
      ['session', sessionId, this.capsOf(sessionId).session, this.spendOf(this.own, sessionId)],
      ['tree', root, this.capsOf(root).tree, this.spendOf(this.trees, root)],
    ];
    for (const [scope, owner, caps, spend] of checks) {
      for (const measure of ['usd', 'tokens'] as const) {
        const cap = caps[measure];
        const spent = measure === 'usd' ? round(spend.usd) : spend.tokens;
        if (cap !== null && spent >= cap) return { scope, budget_session_id: owner, measure, spent, cap };
      }
    }
    return null;
  }

  /** `quota.alert` for each threshold of a USD cap the spend has reached, once per cap value. */
  private alert(owner: string, scope: Scope, now: number): void {
    const cap = this.capsOf(owner)[scope].usd;
    if (cap === null || !(cap > 0)) return;
    for (const pct of ALERT_THRESHOLDS_PCT) {
      const line = (cap * pct) / 100;
      const key = `${owner}:${scope}:${cap}:${pct}`;
      if (round(now) < line || this.alerted.has(key)) continue;
      this.alerted.add(key);
      // The payload's scope names a window and a session budget has none; a session's alert is in the
      // session itself, with no key or user, which tells it from the gateway's (docs: decisions).
      this.bus.emit({
        type: 'quota.alert',
        session_id: owner,
        parent_event_id: null,
        payload: {
          scope: 'daily',
          threshold_pct: pct,
          spent_usd: usdDecimal(now),
          cap_usd: usdDecimal(cap),
          gateway_key_id: null,
          user_id: null,
        },
      });
    }
  }

  private capsOf(sessionId: string): { session: BudgetCaps; tree: BudgetCaps } {
    const set = this.caps.get(sessionId);
    if (set !== undefined) return set;
    const stored = this.rows.capsOf(sessionId);
    if (stored !== null) {
      this.caps.set(sessionId, stored);
      return stored;
    }
    // Configured caps apply to sessions no one delegated to; a worker is bounded by its tree's.
    const configured = this.config.budgets;
    return this.lineage.parentOf(sessionId) === null
      ? { session: { ...NO_CAPS, ...configured.session }, tree: { ...NO_CAPS, ...configured.tree } }
      : { session: NO_CAPS, tree: NO_CAPS };
  }

  private rootOf(sessionId: string): string {
    let id = sessionId;
    for (let depth = 0; depth < 64; depth += 1) {
      const parent = this.lineage.parentOf(id);
      if (parent === null) return id;
      id = parent;
    }
    return id;
  }

  private spendOf(map: Map<string, Spend>, sessionId: string): Spend {
    let spend = map.get(sessionId);
    if (spend === undefined) {
      const scope: Scope = map === this.own ? 'session' : 'tree';
      spend = { ...(scope === 'session' ? this.rows.spentBy(sessionId) : this.rows.spentByTree(sessionId)) };
      map.set(sessionId, spend);
      // The alerts a spend read back has already passed were emitted by the run that counted it.
      this.markAlerted(sessionId, scope, spend.usd);
    }
    return spend;
  }

  private markAlerted(owner: string, scope: Scope, spent: number): void {
    const cap = this.capsOf(owner)[scope].usd;
    if (cap === null || !(cap > 0)) return;
    for (const pct of ALERT_THRESHOLDS_PCT)
      if (round(spent) >= (cap * pct) / 100) this.alerted.add(`${owner}:${scope}:${cap}:${pct}`);
  }
}

function add(spend: Spend, usd: number, tokens: number): void {
  spend.usd += usd;
  spend.tokens += tokens;
}

/**
 * The budget of a session another node runs, as a snapshot shows it (Budgets.view's rules over what is
 * stored: caps set by request, else the configured ones for a session no one delegated to; no turn is
 * paused here). Null when neither it nor its tree has a cap.
 */
export function storedBudgetView(
  stored: StoredBudget | null,
  configured: RuntimeConfig['budgets'],
): BudgetView | null {
  if (stored === null) return null;
  const rootConfigured = {
    session: { ...NO_CAPS, ...configured.session },
    tree: { ...NO_CAPS, ...configured.tree },
  };
  const caps = stored.caps ?? (stored.isWorker ? { session: NO_CAPS, tree: NO_CAPS } : rootConfigured);
  const rootCaps = stored.rootCaps ?? rootConfigured;
  const view: BudgetView = {
    session: { caps: caps.session, spent_usd: round(stored.own.usd), spent_tokens: stored.own.tokens },
    tree: {
      root_session_id: stored.root,
      caps: rootCaps.tree,
      spent_usd: round(stored.tree.usd),
      spent_tokens: stored.tree.tokens,
    },
    paused: [],
  };
  const { session, tree } = { session: caps.session, tree: rootCaps.tree };
  return [session.usd, session.tokens, tree.usd, tree.tokens].some((cap) => cap !== null) ? view : null;
}

function round(usd: number): number {
  return Math.round(usd * 1e8) / 1e8;
}

function definedOf(caps: Partial<BudgetCaps> | undefined): Partial<BudgetCaps> {
  const out: Partial<BudgetCaps> = {};
  if (caps?.usd !== undefined) out.usd = caps.usd;
  if (caps?.tokens !== undefined) out.tokens = caps.tokens;
  return out;
}
