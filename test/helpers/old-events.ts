import { monotonicFactory } from 'ulid';
import type { Db } from '../../src/core/store/database.js';
import { EVENT_COLUMNS, type EventRow } from '../../src/core/store/event-rows.js';

const DAY_MS = 86_400_000;

export interface OldEventsSpec {
  readonly sessionId: string;
  readonly ageDays: number;
  readonly count?: number;
  readonly type?: string;
  readonly sensitivity?: string;
  readonly payload?: Record<string, unknown>;
}

/**
 * Inserts events stamped `ageDays` in the past straight into the table: ids come from a ULID generator
 * seeded with the old time (so the id order and the retention id bound agree with `timestamp_us`),
 * `seq` continues the session's. Payloads are not validated. Returns the inserted ids in order.
 */
export function insertOldEvents(db: Db, spec: OldEventsSpec): string[] {
  const nextUlid = monotonicFactory(); // fresh: a shared one would never go back in time
  const ms = Date.now() - spec.ageDays * DAY_MS;
  const count = spec.count ?? 1;
  const payload = JSON.stringify(spec.payload ?? { note: 'old' });
  const lastSeq = db.prepare('SELECT max(seq) FROM events WHERE session_id = ?').pluck().get(spec.sessionId);
  const insert = db.prepare(
    `INSERT INTO events (session_id, id, seq, timestamp_us, turn_id, parent_event_id, type, actor, sensitivity, payload_json)
     VALUES (?, ?, ?, ?, NULL, NULL, ?, 'system', ?, ?)`,
  );
  const ids: string[] = [];
  db.transaction(() => {
    db.prepare('INSERT OR IGNORE INTO sessions (id, created_at_us, updated_at_us) VALUES (?, ?, ?)').run(
      spec.sessionId,
      ms * 1000,
      ms * 1000,
    );
    for (let i = 0; i < count; i += 1) {
      const id = `evt_${nextUlid(ms)}`;
      const seq = ((lastSeq as number | null) ?? 0) + i + 1;
      insert.run(
        spec.sessionId,
        id,
        seq,
        ms * 1000 + i,
        spec.type ?? 'turn.started',
        spec.sensitivity ?? 'private',
        payload,
      );
      ids.push(id);
    }
  }).immediate();
  return ids;
}

/** Every stored row in id order, raw, as export and replay read them. */
export function allRows(db: Db): EventRow[] {
  return db.prepare(`SELECT ${EVENT_COLUMNS} FROM events ORDER BY id`).raw().all() as EventRow[];
}

export function countByType(db: Db, type: string): number {
  return db.prepare('SELECT count(*) FROM events WHERE type = ?').pluck().get(type) as number;
}
