import type { EventBus } from '../../bus/event-bus.js';
import type { StorePort } from '../../store/store-port.js';
import type { ScoredSession } from '../evaluator/evaluator.js';
import { usdDecimal } from '../pricing.js';
import { type Fingerprint, fingerprintOf } from './fingerprint.js';
import type { Eviction, PatternStore } from './pattern-store.js';

interface Group {
  readonly fingerprint: Fingerprint;
  readonly model: string;
  readonly scores: number[];
  costUsd: number;
  turns: number;
}

/**
 * Learns from a scored session (bus §6.5b `pattern.recorded`, one per fingerprint and model the
 * session's turns had): each turn that ended with a model's answer (completed or failed; a cancel says
 * nothing of the model) adds its score and cost to its fingerprint. Stale outcomes are trimmed first.
 */
export class PatternRecorder {
  constructor(
    private readonly patterns: PatternStore,
    private readonly bus: EventBus,
    private readonly store: Pick<StorePort, 'sessions' | 'lookups'>,
    private readonly pricingVersion: string,
  ) {}

  async record(scored: ScoredSession): Promise<void> {
    const { evidence } = scored;
    if (evidence.endEventId === null) return;
    const trimmed = this.patterns.trimAged();
    if (trimmed !== null) this.evicted('system', trimmed, null);
    const workspaceHash = this.workspaceHashOf(evidence.sessionId);
    const groups = new Map<string, Group>();
    for (const turn of evidence.turns) {
      const score = scored.turnScores.get(turn.turnId);
      if (turn.model === null || score === undefined) continue;
      if (turn.outcome !== 'completed' && turn.outcome !== 'failed') continue;
      const message = await this.store.lookups.userTextOfTurn(evidence.sessionId, turn.turnId);
      if (message === null) continue;
      const fingerprint = fingerprintOf(message, turn.toolsInHistory, workspaceHash);
      const id = `${fingerprint.key}\n${turn.model}`;
      const group = groups.get(id) ?? { fingerprint, model: turn.model, scores: [], costUsd: 0, turns: 0 };
      group.scores.push(score);
      group.costUsd += turn.costUsd;
      group.turns += 1;
      groups.set(id, group);
    }
    for (const group of groups.values()) {
      const score = group.scores.reduce((a, b) => a + b, 0) / group.scores.length;
      const recorded = this.patterns.record({
        fingerprint: group.fingerprint,
        model: group.model,
        sessionId: evidence.sessionId,
        score,
        costUsd: group.costUsd / group.turns,
        turns: group.turns,
      });
      const event = this.bus.emit({
        type: 'pattern.recorded',
        session_id: evidence.sessionId,
        turn_id: null,
        parent_event_id: evidence.endEventId,
        actor: 'system',
        payload: {
          fingerprint_id: recorded.fingerprintId,
          fingerprint_kind: 'structural',
          primary_model: group.model,
          sample_size_before: recorded.sampleSizeBefore,
          sample_size_after: recorded.sampleSizeAfter,
          was_new_fingerprint: recorded.wasNew,
          success_score: Math.round(score * 1000) / 1000,
          cost_usd_at_record: usdDecimal(group.costUsd),
          pricing_version: this.pricingVersion,
          over_soft_cap: recorded.overSoftCap,
        },
      });
      if (recorded.eviction !== null) this.evicted(evidence.sessionId, recorded.eviction, event?.id ?? null);
    }
  }

  /** `pattern.evicted`: after the write that crossed a cap, or in `system` for a trim or a clear. */
  evicted(sessionId: string, eviction: Eviction, parent: string | null): void {
    this.bus.emit({
      type: 'pattern.evicted',
      session_id: sessionId,
      turn_id: null,
      parent_event_id: parent,
      actor: 'system',
      payload: { ...eviction },
    });
  }

  private workspaceHashOf(sessionId: string): string {
    return this.store.sessions.getSession(sessionId)?.workspace_hash ?? '';
  }
}
