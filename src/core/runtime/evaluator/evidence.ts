import type { TraceLookups } from '../../store/trace-lookups.js';

/** What the stored events of one turn say about how it went; what a judge scores. */
export interface TurnEvidence {
  readonly sessionId: string;
  readonly turnId: string;
  /** `turn.completed` or `turn.cancelled`: the parent of a batch verdict. Null while the turn runs. */
  readonly endEventId: string | null;
  readonly outcome: 'completed' | 'failed' | 'cancelled' | 'running';
  readonly stopReason: string | null;
  readonly cancelReason: string | null;
  /** The model that answered last (after an override, the new one); null when no model was called. */
  readonly model: string | null;
  readonly llmCalls: number;
  /** Model calls that failed for a reason other than a cancel. */
  readonly failedCalls: number;
  readonly toolCalls: number;
  readonly toolFailures: number;
  readonly costUsd: number;
  /** Whether the conversation had used tools before this turn (from `turn.started`). */
  readonly toolsInHistory: boolean;
  /** `feedback.implicit` judging this turn (retry, edit_followup, manual_swap). */
  readonly implicit: readonly { readonly type: string; readonly confidence: number }[];
  /** The user's latest explicit rating of this turn, if any. */
  readonly rating: 'thumbs_up' | 'thumbs_down' | null;
}

export interface SessionEvidence {
  readonly sessionId: string;
  readonly endEventId: string | null;
  readonly disposition: string | null;
  readonly turns: readonly TurnEvidence[];
  /** Session-level implicit signals (accept, abandon). */
  readonly implicit: readonly { readonly type: string; readonly confidence: number }[];
  readonly rating: 'thumbs_up' | 'thumbs_down' | null;
}

interface Row {
  readonly id: string;
  readonly type: string;
  readonly turn_id: string | null;
  readonly payload_json: string;
}

type MutableTurn = { -readonly [K in keyof TurnEvidence]: TurnEvidence[K] };

const SESSION_SIGNALS = new Set(['accept', 'abandon']);

const EVIDENCE_TYPES = [
  'turn.started',
  'turn.completed',
  'turn.cancelled',
  'llm.call_started',
  'llm.call_completed',
  'llm.call_failed',
  'tool.completed',
  'tool.failed',
  'feedback.implicit',
  'feedback.explicit',
  'session.ended',
];

/**
 * Reads the evidence of a session from its stored events (a batch reader: the caller waits until the
 * events it reacts to are committed). Turns come in the order they started.
 */
export async function sessionEvidence(lookups: TraceLookups, sessionId: string): Promise<SessionEvidence> {
  const rows = await lookups.eventsOfTypes(sessionId, EVIDENCE_TYPES);
  const turns = new Map<string, MutableTurn>();
  const sessionImplicit: { type: string; confidence: number }[] = [];
  let sessionRating: SessionEvidence['rating'] = null;
  let endEventId: string | null = null;
  let disposition: string | null = null;
  const failing = new Map<string, boolean>();
  for (const row of rows) {
    const payload = JSON.parse(row.payload_json) as Record<string, unknown>;
    if (row.type === 'session.ended') {
      endEventId = row.id;
      disposition = String(payload.disposition);
      continue;
    }
    if (row.type === 'feedback.implicit' || row.type === 'feedback.explicit') {
      const subject = (payload.subject_turn_id as string | null) ?? null;
      // accept and abandon name the last turn but judge the session (bus §6.9).
      const sessionWide = row.type === 'feedback.implicit' && SESSION_SIGNALS.has(String(payload.type));
      const turn = subject === null || sessionWide ? undefined : turns.get(subject);
      if (row.type === 'feedback.implicit') {
        const signal = { type: String(payload.type), confidence: Number(payload.confidence) };
        if (turn) turn.implicit = [...turn.implicit, signal];
        else sessionImplicit.push(signal);
      } else {
        const rating = payload.rating as 'thumbs_up' | 'thumbs_down';
        if (turn) turn.rating = rating;
        else if (payload.scope === 'session') sessionRating = rating;
      }
      continue;
    }
    if (row.turn_id === null) continue;
    if (row.type === 'turn.started') {
      turns.set(row.turn_id, newTurn(sessionId, row.turn_id, payload.has_tool_calls_in_history === true));
      continue;
    }
    const turn = turns.get(row.turn_id);
    if (turn) failing.set(row.turn_id, addTurnEvent(turn, row, payload, failing.get(row.turn_id) ?? false));
  }
  return {
    sessionId,
    endEventId,
    disposition,
    turns: [...turns.values()],
    implicit: sessionImplicit,
    rating: sessionRating,
  };
}

function newTurn(sessionId: string, turnId: string, toolsInHistory: boolean): MutableTurn {
  return {
    sessionId,
    turnId,
    endEventId: null,
    outcome: 'running',
    stopReason: null,
    cancelReason: null,
    model: null,
    llmCalls: 0,
    failedCalls: 0,
    toolCalls: 0,
    toolFailures: 0,
    costUsd: 0,
    toolsInHistory,
    implicit: [],
    rating: null,
  };
}

/** Adds one event to its turn; returns whether the turn's latest model call failed. */
function addTurnEvent(
  turn: MutableTurn,
  row: Row,
  payload: Record<string, unknown>,
  lastCallFailed: boolean,
): boolean {
  switch (row.type) {
    case 'llm.call_started':
      turn.llmCalls += 1;
      turn.model = String(payload.model);
      return false;
    case 'llm.call_completed':
      turn.costUsd += Number(payload.cost_usd) || 0;
      break;
    case 'llm.call_failed':
      if (payload.error_class === 'cancelled') return lastCallFailed;
      turn.failedCalls += 1;
      return true;
    case 'tool.completed':
      turn.toolCalls += 1;
      break;
    case 'tool.failed':
      turn.toolCalls += 1;
      turn.toolFailures += 1;
      break;
    case 'turn.completed':
      turn.endEventId = row.id;
      turn.stopReason = String(payload.stop_reason);
      // A turn whose model call failed still ends with turn.completed (docs/decisions.md "A turn that
      // fails for any reason"): a failed last call is what tells it apart.
      turn.outcome = lastCallFailed ? 'failed' : 'completed';
      break;
    case 'turn.cancelled':
      turn.endEventId = row.id;
      turn.outcome = 'cancelled';
      turn.cancelReason = String(payload.reason);
      break;
  }
  return lastCallFailed;
}
