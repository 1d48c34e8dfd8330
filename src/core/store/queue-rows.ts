import type Database from 'better-sqlite3';
import type { Db } from './database.js';
import { type RowWrite, writeRow } from './trace-writer.js';

/** A session's queued messages as stored (issue 31, schema version 9): turns to come, steers waiting. */
export interface StoredQueue {
  readonly turns: readonly {
    readonly queued_id: string;
    readonly mode: 'enqueue' | 'interrupt';
    readonly message: string;
    readonly model: string | null;
    readonly queued_at_us: number;
  }[];
  /** Words for a running turn, by its id: a resumed turn keeps its id and takes them. */
  readonly steers: readonly {
    readonly turn_id: string;
    readonly queued_id: string;
    readonly message: string;
    readonly queued_at_us: number;
  }[];
}

/** Where the turn queue keeps what it holds, so that a restart or a take-over serves it. */
export interface QueueRows {
  queueOf(sessionId: string): StoredQueue | null;
  /** null: nothing waits. */
  setQueue(sessionId: string, queue: StoredQueue | null): void;
  /** The sessions not ended that have something queued. */
  queuedSessions(): string[];
}

type Statement = Database.Statement<unknown[]>;

export class SqliteQueueRows implements QueueRows {
  private readonly read: Statement;
  private readonly waiting: Statement;

  constructor(private readonly db: Db) {
    this.read = db.prepare('SELECT queue_json FROM sessions WHERE id = ?').pluck();
    this.waiting = db
      .prepare("SELECT id FROM sessions WHERE queue_json IS NOT NULL AND status = 'active' ORDER BY id")
      .pluck();
  }

  queueOf(sessionId: string): StoredQueue | null {
    const json = this.read.get(sessionId) as string | null | undefined;
    return json === null || json === undefined ? null : (JSON.parse(json) as StoredQueue);
  }

  setQueue(sessionId: string, queue: StoredQueue | null): void {
    writeRow(this.db, queueWrite(sessionId, queue));
  }

  queuedSessions(): string[] {
    return this.waiting.all() as string[];
  }
}

/** The row write that keeps a session's queue (null: nothing waits), on any store. */
export function queueWrite(sessionId: string, queue: StoredQueue | null): RowWrite {
  const queueJson = queue === null ? null : JSON.stringify(queue);
  return { what: `queue of ${sessionId}`, change: { kind: 'queue.save', sessionId, queueJson } };
}
