import type { Logger } from 'pino';
import { MetisError } from '../errors.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import { newId } from '../events/ids.js';
import type { QueueRows, StoredQueue } from '../store/queue-rows.js';
import type { TurnOutcome } from './turn-state.js';

/** What `POST /sessions/{id}/turns` does with a message that comes while a turn runs (issue 31). */
export const MULTITASK_STRATEGIES = ['reject', 'enqueue', 'interrupt', 'steer'] as const;
export type Multitask = (typeof MULTITASK_STRATEGIES)[number];

/** A message waiting: a turn to start (`enqueue`, `interrupt`) or words for the running turn (`steer`). */
export interface QueuedMessage {
  readonly queued_id: string;
  readonly mode: 'enqueue' | 'interrupt' | 'steer';
  readonly message: string;
  readonly model: string | null;
  readonly queued_at: string;
  /** 1 for the turn that starts next; 0 for a steer, which goes into the running turn. */
  readonly position: number;
  /** The running turn a steer goes into; null for a turn to come. */
  readonly turn_id: string | null;
}

export interface StartedTurn {
  readonly turnId: string;
  readonly done: Promise<TurnOutcome>;
}

/** What a submit did; an interrupt's turn starts once the cancelled turn has ended (`started`). */
export type Submitted =
  | { readonly status: 'started'; readonly turn: StartedTurn }
  | {
      readonly status: 'queued';
      readonly queuedId: string;
      readonly position: number;
      /** Settles when the queue starts it (or rejects: dropped, the session ended). */
      readonly started: Promise<StartedTurn>;
    }
  | { readonly status: 'steered'; readonly queuedId: string; readonly turnId: string }
  | {
      readonly status: 'interrupting';
      readonly queuedId: string;
      readonly interruptedTurnId: string;
      readonly started: Promise<StartedTurn>;
    };

/** What the queue needs of the runtime. */
export interface TurnQueueHost {
  startTurn(sessionId: string, message: string, model: string | null): StartedTurn;
  /** The turn of a session running now, if any (a session of another process: none). */
  runningTurn(sessionId: string): StartedTurn | null;
  interrupt(sessionId: string, turnId: string): void;
  /** Whether a session takes turns (not ended, the runtime open): else its queue is dropped. */
  acceptsTurns(sessionId: string): boolean;
  /** Where the queues are kept (the session's row). */
  readonly rows: QueueRows;
  readonly logger: Logger;
}

interface Entry {
  readonly queuedId: string;
  mode: 'enqueue' | 'interrupt';
  readonly message: string;
  readonly model: string | null;
  readonly queuedAtUs: number;
  readonly resolve: (turn: StartedTurn) => void;
  readonly reject: (error: unknown) => void;
}

interface Steer {
  readonly queuedId: string;
  readonly message: string;
  readonly queuedAtUs: number;
}

/**
 * Messages sent while a turn runs, per session (docs/http-api.md "Input while a turn runs"): the turns
 * to start after the running one, in order, and the steers the running turn takes at its next model
 * call. A steer the turn had no model call left for becomes the next turn instead, so nothing said is
 * lost. Each change is written to the session's row: a server that stops or dies leaves the queue in
 * the store, and the next start or a node taking the session over serves it (`restore`). A session
 * that ends drops its queue.
 */
export class TurnQueues {
  private readonly turns = new Map<string, Entry[]>();
  /** Per running turn id: the steers it has not taken yet. */
  private readonly steers = new Map<string, { sessionId: string; items: Steer[] }>();
  /** Set when the server stops: what is queued stays in the store for the next start, as it is. */
  private stopped = false;

  private readonly rows: QueueRows;

  constructor(private readonly host: TurnQueueHost) {
    this.rows = host.rows;
  }

  /**
   * Takes up what the store holds queued for a session (a restart, a take-over), behind what this
   * process queued since, and starts the next turn when none runs. No request waits for these starts.
   */
  restore(sessionId: string): void {
    const stored = this.rows.queueOf(sessionId);
    if (stored === null) return;
    const known = new Set(this.list(sessionId).map((item) => item.queued_id));
    const entries = this.turns.get(sessionId) ?? [];
    for (const turn of stored.turns)
      if (!known.has(turn.queued_id))
        entries.push(entryOf(turn.queued_id, turn.mode, turn.message, turn.model, turn.queued_at_us));
    if (entries.length > 0) this.turns.set(sessionId, entries);
    for (const steer of stored.steers) {
      if (known.has(steer.queued_id)) continue;
      const pending = this.steers.get(steer.turn_id) ?? { sessionId, items: [] };
      pending.items.push({
        queuedId: steer.queued_id,
        message: steer.message,
        queuedAtUs: steer.queued_at_us,
      });
      this.steers.set(steer.turn_id, pending);
    }
    // A steer for a turn that is over (it ended before the restart) becomes a turn, as turnEnded does.
    for (const [turnId, pending] of this.steers)
      if (pending.sessionId === sessionId && this.host.runningTurn(sessionId)?.turnId !== turnId)
        this.turnEnded(sessionId, turnId);
    this.startNext(sessionId);
    this.save(sessionId);
  }

  /**
   * Submits a message with a strategy. With no turn running every strategy starts one; `reject` with a
   * turn running throws METIS_ERR_TURN_IN_FLIGHT (as before issue 31).
   */
  submit(sessionId: string, message: string, model: string | null, multitask: Multitask): Submitted {
    const running = this.host.runningTurn(sessionId);
    // A queue that is not empty is served first: a message sent now waits behind it.
    const waiting = this.turns.get(sessionId)?.length ?? 0;
    if (running === null && (waiting === 0 || multitask === 'reject' || multitask === 'interrupt'))
      return { status: 'started', turn: this.host.startTurn(sessionId, message, model) };
    const submitted = this.queue(sessionId, running, message, model, multitask);
    this.save(sessionId);
    return submitted;
  }

  private queue(
    sessionId: string,
    running: StartedTurn | null,
    message: string,
    model: string | null,
    multitask: Multitask,
  ): Submitted {
    switch (multitask) {
      case 'reject':
        throw new MetisError(
          'METIS_ERR_TURN_IN_FLIGHT',
          `session ${sessionId} already has turn ${running?.turnId} in flight (multitask: enqueue, interrupt or steer sends it anyway)`,
        );
      case 'steer':
        if (running !== null) return this.steer(sessionId, running.turnId, message);
        return this.enqueue(sessionId, message, model, 'enqueue');
      case 'enqueue':
        return this.enqueue(sessionId, message, model, 'enqueue');
      case 'interrupt': {
        const turnId = running!.turnId;
        const queued = this.enqueue(sessionId, message, model, 'interrupt');
        this.host.interrupt(sessionId, turnId);
        return {
          status: 'interrupting',
          queuedId: queued.queuedId,
          interruptedTurnId: turnId,
          started: queued.started,
        };
      }
    }
  }

  /** The session's queue as clients see it: steers for the running turn, then the turns to come. */
  list(sessionId: string): QueuedMessage[] {
    const out: QueuedMessage[] = [];
    for (const [turnId, { sessionId: owner, items }] of this.steers) {
      if (owner !== sessionId) continue;
      for (const s of items)
        out.push({
          queued_id: s.queuedId,
          mode: 'steer',
          message: s.message,
          model: null,
          queued_at: microsToIso(s.queuedAtUs),
          position: 0,
          turn_id: turnId,
        });
    }
    (this.turns.get(sessionId) ?? []).forEach((e, index) => {
      out.push({
        queued_id: e.queuedId,
        mode: e.mode,
        message: e.message,
        model: e.model,
        queued_at: microsToIso(e.queuedAtUs),
        position: index + 1,
        turn_id: null,
      });
    });
    return out;
  }

  /** Drops a queued message or a steer not taken yet; false when there is none by that id. */
  drop(sessionId: string, queuedId: string): boolean {
    const entries = this.turns.get(sessionId) ?? [];
    const index = entries.findIndex((e) => e.queuedId === queuedId);
    if (index >= 0) {
      const [entry] = entries.splice(index, 1);
      entry!.reject(new MetisError('METIS_ERR_TURN_NOT_FOUND', `queued message ${queuedId} was dropped`));
      this.save(sessionId);
      return true;
    }
    for (const { sessionId: owner, items } of this.steers.values()) {
      const at = owner === sessionId ? items.findIndex((s) => s.queuedId === queuedId) : -1;
      if (at >= 0) {
        items.splice(at, 1);
        this.save(sessionId);
        return true;
      }
    }
    return false;
  }

  /** The steers a running turn takes now, at its next model call (turn-runner.ts). */
  takeSteered(turnId: string): string[] {
    const pending = this.steers.get(turnId);
    if (pending === undefined || pending.items.length === 0) return [];
    this.steers.delete(turnId);
    this.save(pending.sessionId);
    return pending.items.map((s) => s.message);
  }

  /**
   * A turn of the session ended: steers it did not take go first, then the next turn starts. Called
   * once `session.turn` is cleared, so a start here is not refused as a turn in flight.
   */
  turnEnded(sessionId: string, turnId: string): void {
    const left = this.steers.get(turnId);
    this.steers.delete(turnId);
    const entries = this.turns.get(sessionId) ?? [];
    if (left !== undefined && left.items.length > 0) {
      const asTurns = left.items.map((s) => entryOf(s.queuedId, 'enqueue', s.message, null, s.queuedAtUs));
      entries.unshift(...asTurns);
      this.turns.set(sessionId, entries);
    }
    this.startNext(sessionId);
    this.save(sessionId);
  }

  /** Drops a session's queue (it ended, or the server stops); those waiting for a start are told. */
  forget(sessionId: string): void {
    for (const entry of this.turns.get(sessionId) ?? [])
      entry.reject(new MetisError('METIS_ERR_SESSION_ENDED', `session ${sessionId} has ended`));
    this.turns.delete(sessionId);
    for (const [turnId, pending] of this.steers)
      if (pending.sessionId === sessionId) this.steers.delete(turnId);
    this.save(sessionId);
  }

  /** The server stops: those waiting for a start are told; the store keeps the queues for the next start. */
  forgetAll(): void {
    this.stopped = true;
    for (const sessionId of [...this.turns.keys()]) this.forget(sessionId);
    this.steers.clear();
  }

  /** Writes the session's queue as it is now to its row (nothing once the server stops). */
  private save(sessionId: string): void {
    if (this.stopped) return;
    const queue: StoredQueue = {
      turns: (this.turns.get(sessionId) ?? []).map((e) => ({
        queued_id: e.queuedId,
        mode: e.mode,
        message: e.message,
        model: e.model,
        queued_at_us: e.queuedAtUs,
      })),
      steers: [...this.steers].flatMap(([turnId, pending]) =>
        pending.sessionId !== sessionId
          ? []
          : pending.items.map((s) => ({
              turn_id: turnId,
              queued_id: s.queuedId,
              message: s.message,
              queued_at_us: s.queuedAtUs,
            })),
      ),
    };
    const empty = queue.turns.length === 0 && queue.steers.length === 0;
    try {
      this.rows.setQueue(sessionId, empty ? null : queue);
    } catch (error) {
      this.host.logger.warn({ session_id: sessionId, err: error }, 'could not store the session queue');
    }
  }

  private startNext(sessionId: string): void {
    const entries = this.turns.get(sessionId);
    if (entries === undefined || entries.length === 0) return;
    if (!this.host.acceptsTurns(sessionId)) {
      this.forget(sessionId);
      return;
    }
    if (this.host.runningTurn(sessionId) !== null) return;
    const entry = entries.shift()!;
    if (entries.length === 0) this.turns.delete(sessionId);
    try {
      entry.resolve(this.host.startTurn(sessionId, entry.message, entry.model));
    } catch (error) {
      this.host.logger.warn(
        { session_id: sessionId, queued_id: entry.queuedId, err: error },
        'a queued message could not start its turn; dropped',
      );
      entry.reject(error);
      this.startNext(sessionId);
    }
  }

  private enqueue(
    sessionId: string,
    message: string,
    model: string | null,
    mode: Entry['mode'],
  ): Extract<Submitted, { status: 'queued' }> {
    const entries = this.turns.get(sessionId) ?? [];
    const entry = entryOf(newId('queued'), mode, message, model, nowMicros());
    // An interrupt goes before what was queued earlier: it is what the user wants now.
    if (mode === 'interrupt') entries.unshift(entry);
    else entries.push(entry);
    this.turns.set(sessionId, entries);
    return {
      status: 'queued',
      queuedId: entry.queuedId,
      position: entries.indexOf(entry) + 1,
      started: startedOf(entry),
    };
  }

  private steer(sessionId: string, turnId: string, message: string): Submitted {
    const pending = this.steers.get(turnId) ?? { sessionId, items: [] };
    const queuedId = newId('queued');
    pending.items.push({ queuedId, message, queuedAtUs: nowMicros() });
    this.steers.set(turnId, pending);
    return { status: 'steered', queuedId, turnId };
  }
}

const STARTED = new WeakMap<Entry, Promise<StartedTurn>>();

function entryOf(
  queuedId: string,
  mode: Entry['mode'],
  message: string,
  model: string | null,
  queuedAtUs: number,
): Entry {
  let resolve!: (turn: StartedTurn) => void;
  let reject!: (error: unknown) => void;
  const started = new Promise<StartedTurn>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Most entries have no one waiting for their start: a drop must not be an unhandled rejection.
  started.catch(() => undefined);
  const entry: Entry = { queuedId, mode, message, model, queuedAtUs, resolve, reject };
  STARTED.set(entry, started);
  return entry;
}

function startedOf(entry: Entry): Promise<StartedTurn> {
  return STARTED.get(entry)!;
}
