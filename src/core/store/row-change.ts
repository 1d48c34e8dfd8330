/**
 * A row write of the store as data: what a producer (the session store, budgets, patterns, the queue,
 * the stream archive, gap reports, handoff settles, titles) wants changed, with every value the change
 * needs, JSON-able. The trace writer queues these with the events and a store's applier renders them
 * (sqlite-row-applier.ts today); a PostgreSQL writer renders the same changes as its own statements.
 *
 * Values read at write time stay out of the data: an update that adds (`budget.spend`) or depends on
 * rows committed just before it (`toolCall.closeOpen`, the deletes) is done by the statement itself,
 * so it stays atomic however late the change is applied.
 */
export type RowChange =
  | SessionCreate
  | {
      readonly kind: 'session.sticky';
      readonly sessionId: string;
      readonly model: string;
      readonly atUs: number;
    }
  | {
      readonly kind: 'session.end';
      readonly sessionId: string;
      readonly disposition: string;
      readonly atUs: number;
    }
  | MessageUpsert
  | ToolCallInsert
  | ToolCallUpdate
  | ToolCallCloseOpen
  | { readonly kind: 'budget.caps'; readonly sessionId: string; readonly capsJson: string }
  | {
      readonly kind: 'budget.spend';
      readonly sessionId: string;
      readonly usd: number;
      readonly tokens: number;
    }
  /** null: nothing waits. */
  | { readonly kind: 'queue.save'; readonly sessionId: string; readonly queueJson: string | null }
  | PatternInsert
  | { readonly kind: 'pattern.deleteRecordedBefore'; readonly cutoffUs: number }
  | { readonly kind: 'pattern.deleteOldest'; readonly count: number }
  | { readonly kind: 'pattern.deleteAll' }
  | { readonly kind: 'archive.insert'; readonly events: readonly ArchivedEvent[] }
  | ArchivePrune
  | GapReported
  | { readonly kind: 'handoff.settle'; readonly settles: readonly HandoffSettle[] }
  /** null clears the user's title (the first message titles the session again). */
  | {
      readonly kind: 'title.set';
      readonly sessionId: string;
      readonly title: string | null;
      readonly atUs: number;
    };

export type RowChangeKind = RowChange['kind'];

/** The trace writer may already have created a bare row for the id: this one fills it in. */
export interface SessionCreate {
  readonly kind: 'session.create';
  readonly sessionId: string;
  readonly parentSessionId: string | null;
  readonly workspacePath: string;
  readonly workspaceHash: string;
  readonly activeModel: string | null;
  readonly stickyModel: string | null;
  readonly atUs: number;
}

/** A message saved again keeps its role, model and creation time; content, status and usage change. */
export interface MessageUpsert {
  readonly kind: 'message.upsert';
  readonly id: string;
  readonly sessionId: string;
  readonly turnId: string | null;
  readonly role: string;
  readonly contentJson: string;
  readonly status: string;
  readonly model: string | null;
  readonly usageJson: string | null;
  readonly createdAtUs: number;
}

export interface ToolCallInsert {
  readonly kind: 'toolCall.insert';
  /** From the connection's row id block (row-ids.ts); null lets the store choose. */
  readonly rowId: number | null;
  readonly id: string;
  readonly sessionId: string;
  readonly turnId: string | null;
  readonly messageId: string | null;
  readonly toolName: string;
  readonly inputJson: string;
  readonly status: string;
  readonly atUs: number;
}

/** Keyed by session, turn and message as well: a provider's tool_use id is unique only in its message. */
export interface ToolCallUpdate {
  readonly kind: 'toolCall.update';
  readonly id: string;
  readonly sessionId: string;
  readonly turnId: string | null;
  readonly messageId: string | null;
  readonly status: string;
  /** null keeps the output stored. */
  readonly outputJson: string | null;
  readonly errorClass: string | null;
  readonly atUs: number;
}

/** Closes the session's (the turn's, when given) calls still pending or running when it is applied. */
export interface ToolCallCloseOpen {
  readonly kind: 'toolCall.closeOpen';
  readonly sessionId: string;
  readonly turnId: string | null;
  readonly status: 'failed' | 'cancelled';
  readonly errorClass: string;
  /** Stored only where the call has no output yet. */
  readonly outputJson: string;
  readonly atUs: number;
}

/** A pattern outcome to record (pattern-rows.ts), with what identifies its fingerprint. */
export interface NewOutcome {
  readonly fingerprintId: string;
  readonly key: string;
  readonly featuresJson: string;
  readonly model: string;
  readonly sessionId: string;
  readonly score: number | null;
  readonly costUsd: number;
  readonly turns: number;
  readonly atUs: number;
}

/** An outcome, and its fingerprint when the store does not have it yet. */
export interface PatternInsert extends NewOutcome {
  readonly kind: 'pattern.insert';
  readonly rowId: number | null;
}

export interface ArchivedEvent {
  readonly sessionId: string;
  readonly id: string;
  readonly timestampUs: number;
  readonly eventJson: string;
}

/** Each session's archived events older than `cutoffUs` beyond its newest `keep` go; its horizon rises. */
export interface ArchivePrune {
  readonly kind: 'archive.prune';
  readonly sessionIds: readonly string[];
  readonly cutoffUs: number;
  readonly keep: number;
}

/** A dropped run reported as `bus.gap_detected`, so that the startup scan does not report it again. */
export interface GapReported {
  readonly kind: 'gap.reported';
  readonly sessionId: string;
  readonly gapStartId: string;
  readonly gapEndId: string;
  readonly missingCount: number;
  readonly atUs: number;
}

/**
 * One handoff's settle (handoff-settle.ts), checked against what is stored when it is applied: `event`
 * only once its event is stored (recording its gap, for a gap report), `gap` only once that gap is
 * recorded, `discard` always. A settled handoff's row is deleted.
 */
export type HandoffSettle = { readonly handoffId: number } & (
  | { readonly by: 'event'; readonly eventId: string; readonly gap: GapRecord | null }
  | { readonly by: 'gap'; readonly sessionId: string; readonly gapStartId: string }
  | { readonly by: 'discard' }
);

export interface GapRecord {
  readonly sessionId: string;
  readonly gapStartId: string;
  readonly gapEndId: string;
  readonly missingCount: number;
  readonly atUs: number;
}

/** What applying a change found that its producer waits for: only a handoff settle reports anything. */
export interface RowOutcome {
  /** The handoffs settled by their stored event. */
  readonly settledByEvent: readonly number[];
}
