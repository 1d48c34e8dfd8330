import type { EventBus } from '../../bus/event-bus.js';
import type { Db } from '../../store/database.js';
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
    private readonly store: PatternStore,
    private readonly bus: EventBus,
    private readonly db: Db,
    private readonly pricingVersion: string,
  ) {}

  record(scored: ScoredSession): void {
    const { evidence } = scored;
    if (evidence.endEventId === null) return;
    const trimmed = this.store.trimAged();
    if (trimmed !== null) this.evicted('system', trimmed, null);
    const workspaceHash = this.workspaceHashOf(evidence.sessionId);
    const groups = new Map<string, Group>();
    for (const turn of evidence.turns) {
      const score = scored.turnScores.get(turn.turnId);
      if (turn.model === null || score === undefined) continue;
      if (turn.outcome !== 'completed' && turn.outcome !== 'failed') continue;
      const message = this.userMessageOf(evidence.sessionId, turn.turnId);
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
      const recorded = this.store.record({
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

  private userMessageOf(sessionId: string, turnId: string): string | null {
    const row = this.db
      .prepare(
        "SELECT content_json FROM messages WHERE session_id = ? AND turn_id = ? AND role = 'user' ORDER BY id LIMIT 1",
      )
      .get(sessionId, turnId) as { content_json: string } | undefined;
    if (row === undefined) return null;
    const content = JSON.parse(row.content_json) as { type: string; text?: string }[];
    return content
      .filter((b) => b.type === 'text')
      .map((b) => b.text ?? '')
      .join('');
  }

  private workspaceHashOf(sessionId: string): string {
    const row = this.db.prepare('SELECT workspace_hash FROM sessions WHERE id = ?').get(sessionId) as
      | { workspace_hash: string | null }
      | undefined;
    return row?.workspace_hash ?? '';
  }
}
