import { nowMicros } from '../events/clock.js';
import type { RowWrite } from './batch-committer.js';
import { MessageMarks } from './message-marks.js';
import type { RowChange } from './row-change.js';
import type { MessageRecord, ToolCallKey, ToolCallStatus } from './session-records.js';
import type { UnsettledMessages } from './unsettled-messages.js';

/** Where a store's row writes go: the SQLite file's writer, or a PostgreSQL writer's queue. */
export interface RowSink {
  /** Applies the row now or queues it behind the events of the same tick. */
  write(row: RowWrite): void;
  /** The key of the next tool-call row this process inserts, or null to let the store choose. */
  nextRowId(): number | null;
}

/**
 * What the runtime writes of sessions, messages and tool calls, as row changes handed to a sink, in
 * order with the events of the same tick. Messages written and not stored yet are kept here until
 * their row settles, so a reader of the store (SessionStore) can merge them in.
 */
export class SessionWrites implements UnsettledMessages {
  /** Messages written but not committed yet, by id. */
  protected readonly pendingMessages = new Map<string, MessageRecord>();
  protected readonly marks = new MessageMarks();

  constructor(private readonly sink: RowSink) {}

  unsettledMessages(sessionId: string): MessageRecord[] {
    if (this.pendingMessages.size === 0) return [];
    return [...this.pendingMessages.values()].filter((m) => m.session_id === sessionId);
  }

  shownAfter(sessionId: string, messageId: string, atId: string): boolean {
    return this.marks.isAfter(sessionId, messageId, atId);
  }

  countShownAfter(sessionId: string, atId: string): number {
    return this.marks.countAfter(sessionId, atId);
  }

  private write(what: string, change: RowChange, settled?: RowWrite['settled']): void {
    this.sink.write({ what, change, settled });
  }

  createSession(session: {
    id: string;
    parent_session_id?: string | null;
    workspace_path: string;
    workspace_hash: string;
    active_model: string | null;
    sticky_model?: string | null;
    /** When it was made (default: now): the owner's memory of the row says the same. */
    created_at_us?: number;
  }): void {
    const now = session.created_at_us ?? nowMicros();
    this.write(`session ${session.id}`, {
      kind: 'session.create',
      sessionId: session.id,
      parentSessionId: session.parent_session_id ?? null,
      workspacePath: session.workspace_path,
      workspaceHash: session.workspace_hash,
      activeModel: session.active_model,
      stickyModel: session.sticky_model ?? null,
      atUs: now,
    });
  }

  /** Pins the session's model (`manual_sticky`); it is also the active model from now on. */
  setStickyModel(id: string, model: string): void {
    const now = nowMicros();
    this.write(`sticky model of ${id}`, { kind: 'session.sticky', sessionId: id, model, atUs: now });
  }

  endSession(id: string, disposition: string): void {
    const now = nowMicros();
    this.write(`end of ${id}`, { kind: 'session.end', sessionId: id, disposition, atUs: now });
  }

  /**
   * Saves a message. `visibleWith` is the id of the event with which it became part of the conversation
   * (see MessageMarks), null when none did (it then shows in every snapshot from now on).
   */
  saveMessage(
    message: Omit<MessageRecord, 'created_at_us'>,
    visibleWith: string | null,
    createdAtUs: number = nowMicros(),
  ): void {
    if (visibleWith !== null) this.marks.mark(message.session_id, message.id, visibleWith);
    const now = createdAtUs;
    const pending: MessageRecord = { ...message, created_at_us: now };
    this.pendingMessages.set(message.id, pending);
    const settled = () => {
      // A later save of the same message replaced this one: that one clears the entry.
      if (this.pendingMessages.get(message.id) === pending) this.pendingMessages.delete(message.id);
    };
    this.write(
      `message ${message.id}`,
      {
        kind: 'message.upsert',
        id: message.id,
        sessionId: message.session_id,
        turnId: message.turn_id,
        role: message.role,
        contentJson: JSON.stringify(message.content),
        status: message.status,
        model: message.model,
        usageJson: message.usage === null ? null : JSON.stringify(message.usage),
        createdAtUs: now,
      },
      settled,
    );
  }

  saveToolCall(call: {
    id: string;
    session_id: string;
    turn_id: string | null;
    message_id: string | null;
    tool_name: string;
    input: unknown;
    status: ToolCallStatus;
  }): void {
    const now = nowMicros();
    this.write(`tool call ${call.id}`, {
      kind: 'toolCall.insert',
      // Taken now, in queue order: rows are applied in that order, so the keys run as they did.
      rowId: this.sink.nextRowId(),
      id: call.id,
      sessionId: call.session_id,
      turnId: call.turn_id,
      messageId: call.message_id,
      toolName: call.tool_name,
      inputJson: JSON.stringify(call.input),
      status: call.status,
      atUs: now,
    });
  }

  updateToolCall(
    key: ToolCallKey,
    update: { status: ToolCallStatus; output?: unknown; error_class?: string | null },
  ): void {
    const now = nowMicros();
    this.write(`tool call ${key.id} ${update.status}`, {
      kind: 'toolCall.update',
      id: key.id,
      sessionId: key.session_id,
      turnId: key.turn_id,
      messageId: key.message_id,
      status: update.status,
      outputJson: update.output === undefined ? null : JSON.stringify(update.output),
      errorClass: update.error_class ?? null,
      atUs: now,
    });
  }

  /**
   * Closes the tool calls of a session (of one turn, when given) still `pending` or `running`: after a
   * turn failed, or at start-up for turns a crash cut. Queued behind rows not committed yet (a tool call
   * of the same turn still waiting for storage), so it closes those too.
   */
  closeOpenToolCalls(
    sessionId: string,
    close: { turnId?: string; status: 'failed' | 'cancelled'; errorClass: string; output: string },
  ): void {
    const turnId = close.turnId ?? null;
    const now = nowMicros();
    this.write(`open tool calls of ${turnId ?? sessionId}`, {
      kind: 'toolCall.closeOpen',
      sessionId,
      turnId,
      status: close.status,
      errorClass: close.errorClass,
      outputJson: JSON.stringify(close.output),
      atUs: now,
    });
  }
}
