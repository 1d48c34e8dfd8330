import type { EventBus } from '../bus/event-bus.js';

/**
 * The heuristics of bus §6.9 behind `feedback.implicit`: signals a user gives without rating anything.
 * They are guesses, and `confidence` says how good (docs/decisions.md "Implicit feedback").
 */

/** A message at least this similar (word sets, Jaccard) to one of the last few is a retry. */
const RETRY_SIMILARITY = 0.8;
/** How many earlier user messages a retry is looked for among. */
const RETRY_LOOKBACK = 3;
const EDIT_FOLLOWUP =
  /^\s*(no[,.!]?\s+(actually|that|it|i\s+meant|not)\b|actually[,\s]|that'?s\s+(wrong|not)\b|not\s+what\s+i\b|wrong[,.!\s]|i\s+meant\b)/i;

export interface EndedTurn {
  readonly turnId: string;
  readonly status: 'completed' | 'failed' | 'cancelled';
  readonly model: string;
}

/** What one session's user said and how its turns ended, as far as the heuristics need. */
export class FeedbackMemory {
  private readonly said: { turnId: string; words: Set<string> }[] = [];
  lastEnded: EndedTurn | null = null;
  /** The last turn already judged by a signal: one signal per turn at most. */
  private judged: string | null = null;

  /** The signal the new message gives about an earlier turn, if any; then remembers the message. */
  onMessage(turnId: string, text: string): Signal | null {
    const words = wordsOf(text);
    let signal: Signal | null = null;
    const previous = this.lastEnded;
    if (previous !== null && this.judged !== previous.turnId) {
      let best: { turnId: string; similarity: number } | null = null;
      for (const earlier of this.said.slice(-RETRY_LOOKBACK)) {
        const similarity = jaccard(words, earlier.words);
        if (similarity >= RETRY_SIMILARITY && (best === null || similarity > best.similarity))
          best = { turnId: earlier.turnId, similarity };
      }
      if (best !== null)
        signal = {
          type: 'retry',
          confidence: round(0.5 + 0.45 * best.similarity),
          subjectTurnId: previous.turnId,
          context: { similarity: round(best.similarity), similar_to_turn_id: best.turnId },
        };
      else if (EDIT_FOLLOWUP.test(text))
        signal = {
          type: 'edit_followup',
          confidence: 0.7,
          subjectTurnId: previous.turnId,
          context: { opening: text.trim().split(/\s+/).slice(0, 3).join(' ') },
        };
    }
    if (signal !== null) this.judged = signal.subjectTurnId;
    this.said.push({ turnId, words });
    if (this.said.length > RETRY_LOOKBACK) this.said.shift();
    return signal;
  }

  /** The user picked another model right after a turn: a sign the turn did not satisfy. */
  onModelSwap(from: string, to: string): Signal | null {
    const previous = this.lastEnded;
    if (previous === null || from === to || this.judged === previous.turnId) return null;
    this.judged = previous.turnId;
    return {
      type: 'manual_swap',
      confidence: 0.6,
      subjectTurnId: previous.turnId,
      context: { from_model: from, to_model: to },
    };
  }

  /** The session ended: left idle after its last turn (abandon), or closed after one that went well. */
  onSessionEnd(disposition: string): Signal | null {
    const previous = this.lastEnded;
    if (previous === null || this.judged === previous.turnId) return null;
    if (disposition === 'abandoned')
      return { type: 'abandon', confidence: 0.5, subjectTurnId: previous.turnId, context: { disposition } };
    if (disposition === 'completed' && previous.status === 'completed')
      return { type: 'accept', confidence: 0.4, subjectTurnId: previous.turnId, context: { disposition } };
    return null;
  }
}

export interface Signal {
  readonly type: 'retry' | 'manual_swap' | 'edit_followup' | 'abandon' | 'accept';
  readonly confidence: number;
  readonly subjectTurnId: string;
  readonly context: Record<string, unknown>;
}

/** Emits a signal in its session, outside any turn (it judges an earlier one, named in the payload). */
export function emitSignal(bus: EventBus, sessionId: string, signal: Signal, parent: string | null): void {
  bus.emit({
    type: 'feedback.implicit',
    session_id: sessionId,
    turn_id: null,
    parent_event_id: parent,
    actor: 'system',
    payload: {
      type: signal.type,
      confidence: signal.confidence,
      subject_turn_id: signal.subjectTurnId,
      context: signal.context,
    },
  });
}

function wordsOf(text: string): Set<string> {
  return new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []);
}

function jaccard(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  if (a.size === 0 && b.size === 0) return 0;
  let shared = 0;
  for (const word of a) if (b.has(word)) shared += 1;
  return shared / (a.size + b.size - shared);
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
