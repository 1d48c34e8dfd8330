import { nowMicros } from '../events/clock.js';
import type { StoredCaps } from '../store/budget-rows.js';
import type { FamilyState, LoadedSession } from '../store/family-state.js';
import { RECENT_MESSAGES } from '../store/family-state.js';
import type { StoredQueue } from '../store/queue-rows.js';
import type { MessageRecord, SessionRecord } from '../store/session-store.js';
import type { SessionRows } from '../store/store-port.js';
import { SyncReadRefused } from '../store/write-only-session-rows.js';

/** A held session's budget as its rows say, following this process's writes (OwnerBudgetRows). */
export interface HeldBudget {
  caps: StoredCaps | null;
  readonly spent: { usd: number; tokens: number };
}

/** A held session's queued messages as its row says, following this process's writes (OwnerQueueRows). */
export interface HeldQueue {
  queue: StoredQueue | null;
}

/** What the owner keeps of a session it holds: enough to run it without reading the store. */
interface HeldSession {
  row: SessionRecord;
  readonly budget: HeldBudget;
  readonly queued: HeldQueue;
  /** The newest RECENT_MESSAGES messages, in id order, as written here since the load. */
  readonly messages: MessageRecord[];
  /** Whether `messages` is the whole conversation (nothing older was left in the store). */
  complete: boolean;
  readonly children: Set<string>;
  /** What the family's load said of the session; null for one created here. */
  readonly loaded: LoadedSession | null;
}

/**
 * The session rows as the owner of a session sees them (issue 35, store-port.md step 4): the sessions
 * this process holds (created here, or loaded with their family by `hold`) are answered from memory,
 * which follows every write made through here; writes go on to the store's rows; any other session is
 * read from the store. So a running session's row, lineage and recent conversation never need a
 * synchronous read of the store, which a backend over the network cannot answer.
 */
export class OwnerRows implements SessionRows {
  private readonly held = new Map<string, HeldSession>();

  constructor(private readonly store: SessionRows) {}

  /** Takes up what a family's load read, for the sessions not held already (memory is newer). */
  hold(family: FamilyState): void {
    for (const loaded of family.sessions) {
      if (this.held.has(loaded.row.id)) continue;
      this.held.set(loaded.row.id, {
        row: loaded.row,
        messages: [...loaded.recentMessages],
        complete: loaded.recentMessages.length < RECENT_MESSAGES,
        children: new Set(loaded.childIds),
        budget: { caps: loaded.budgetCaps, spent: { ...loaded.spent } },
        queued: { queue: loaded.queue },
        loaded,
      });
    }
  }

  /** Whether the session is held here. */
  holds(sessionId: string): boolean {
    return this.held.has(sessionId);
  }

  /** What the family's load said of a held session (undefined: not held, or created here). */
  loadedState(sessionId: string): LoadedSession | undefined {
    return this.held.get(sessionId)?.loaded ?? undefined;
  }

  /** The budget of a held session (undefined: not held). */
  heldBudget(sessionId: string): HeldBudget | undefined {
    return this.held.get(sessionId)?.budget;
  }

  /** The queue of a held session (undefined: not held). */
  heldQueue(sessionId: string): HeldQueue | undefined {
    return this.held.get(sessionId)?.queued;
  }

  /** The session and every one below it, when all are held; null when one is not (the store knows). */
  heldTree(rootSessionId: string): string[] | null {
    const tree = [rootSessionId];
    for (let i = 0; i < tree.length; i += 1) {
      const held = this.held.get(tree[i]!);
      if (held === undefined) return null;
      tree.push(...held.children);
    }
    return tree;
  }

  /** Lets go of a session: its next read goes to the store, its next use loads it again. */
  forget(sessionId: string): void {
    this.held.delete(sessionId);
  }

  createSession(session: Parameters<SessionRows['createSession']>[0]): void {
    const now = session.created_at_us ?? nowMicros();
    this.store.createSession({ ...session, created_at_us: now });
    const parent = session.parent_session_id ?? null;
    this.held.set(session.id, {
      row: {
        id: session.id,
        parent_session_id: parent,
        workspace_path: session.workspace_path,
        workspace_hash: session.workspace_hash,
        active_model: session.active_model,
        sticky_model: session.sticky_model ?? null,
        status: 'active',
        disposition: null,
        created_at_us: now,
        updated_at_us: now,
      },
      messages: [],
      complete: true,
      children: new Set(),
      budget: { caps: null, spent: { usd: 0, tokens: 0 } },
      queued: { queue: null },
      loaded: null,
    });
    if (parent !== null) this.held.get(parent)?.children.add(session.id);
  }

  getSession(id: string): SessionRecord | null {
    return this.held.get(id)?.row ?? this.store.getSession(id);
  }

  childSessionIds(parentId: string): string[] {
    const held = this.held.get(parentId);
    return held === undefined ? this.store.childSessionIds(parentId) : [...held.children];
  }

  setStickyModel(id: string, model: string): void {
    this.store.setStickyModel(id, model);
    const held = this.held.get(id);
    if (held !== undefined) held.row = { ...held.row, active_model: model, sticky_model: model };
  }

  endSession(id: string, disposition: string): void {
    this.store.endSession(id, disposition);
    const held = this.held.get(id);
    if (held !== undefined) held.row = { ...held.row, status: 'ended', disposition };
  }

  saveMessage(message: Omit<MessageRecord, 'created_at_us'>, visibleWith: string | null): void {
    const createdAtUs = nowMicros();
    this.store.saveMessage(message, visibleWith, createdAtUs);
    const held = this.held.get(message.session_id);
    if (held !== undefined) remember(held, message, createdAtUs);
  }

  hasMessage(sessionId: string, messageId: string): boolean {
    const held = this.held.get(sessionId);
    if (held?.messages.some((m) => m.id === messageId)) return true;
    if (held?.complete) return false;
    return this.store.hasMessage(sessionId, messageId);
  }

  messages(sessionId: string, options: { beforeId?: string | null; limit?: number } = {}): MessageRecord[] {
    const held = this.held.get(sessionId);
    const limit = options.limit ?? 50;
    const beforeId = options.beforeId ?? null;
    if (held === undefined) return this.store.messages(sessionId, options);
    const before = beforeId === null ? held.messages : held.messages.filter((m) => m.id < beforeId);
    // Older messages than memory keeps are the store's to answer.
    if (before.length < limit && !held.complete) return this.store.messages(sessionId, options);
    // A copy, as a read of the store gives: the caller may build on what it gets.
    return structuredClone(before.slice(-limit));
  }

  messagesAsOf(sessionId: string, atId: string, limit: number): MessageRecord[] {
    return this.store.messagesAsOf(sessionId, atId, limit);
  }

  listSessions(limit?: number): SessionRecord[] {
    return this.store.listSessions(limit);
  }

  lastEventId(sessionId: string): string | null {
    return this.store.lastEventId(sessionId);
  }

  storedCost(sessionId: string): number {
    return this.store.storedCost(sessionId);
  }

  turnCount(sessionId: string): number {
    return this.store.turnCount(sessionId);
  }

  turnState(sessionId: string): { turnCount: number; currentTurnId: string | null } {
    return this.store.turnState(sessionId);
  }

  /**
   * Whether the store holds the turn (asked by a cancel of a turn memory does not know). A store read
   * only asynchronously refuses (PostgreSQL alone): the turn counts as unknown, so the cancel answers
   * 404 rather than failing.
   */
  hasTurn(sessionId: string, turnId: string): boolean {
    try {
      return this.store.hasTurn(sessionId, turnId);
    } catch (error) {
      if (error instanceof SyncReadRefused) return false;
      throw error;
    }
  }

  unansweredConfirmations(sessionIds: readonly string[]): ReturnType<SessionRows['unansweredConfirmations']> {
    return this.store.unansweredConfirmations(sessionIds);
  }

  saveToolCall(call: Parameters<SessionRows['saveToolCall']>[0]): void {
    this.store.saveToolCall(call);
  }

  updateToolCall(...args: Parameters<SessionRows['updateToolCall']>): void {
    this.store.updateToolCall(...args);
  }

  closeOpenToolCalls(...args: Parameters<SessionRows['closeOpenToolCalls']>): void {
    this.store.closeOpenToolCalls(...args);
  }

  toolCall(id: string, sessionId?: string): ReturnType<SessionRows['toolCall']> {
    return this.store.toolCall(id, sessionId);
  }
}

/** Writes a saved message into memory as the store's upsert does: a second save changes its content only. */
function remember(
  held: HeldSession,
  message: Omit<MessageRecord, 'created_at_us'>,
  createdAtUs: number,
): void {
  const { messages } = held;
  const at = messages.findIndex((m) => m.id === message.id);
  if (at >= 0) {
    const saved = messages[at]!;
    const { content, usage } = structuredClone({ content: message.content, usage: message.usage });
    messages[at] = { ...saved, content, status: message.status, usage };
    return;
  }
  const entry: MessageRecord = { ...structuredClone(message), created_at_us: createdAtUs };
  let i = messages.length;
  while (i > 0 && messages[i - 1]!.id > entry.id) i -= 1;
  messages.splice(i, 0, entry);
  if (messages.length > RECENT_MESSAGES) {
    messages.shift();
    held.complete = false;
  }
}
