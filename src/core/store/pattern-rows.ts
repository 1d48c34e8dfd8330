import type { Db } from './database.js';
import type { NewOutcome, RowChange } from './row-change.js';
import type { RowSink } from './session-writes.js';
import { sqliteRowSink } from './trace-writer.js';

export interface StoredFingerprint {
  readonly id: string;
  readonly key: string;
  readonly features_json: string;
}

export interface StoredOutcome {
  /** Row id: insertion order. */
  readonly id: number;
  readonly fingerprint_id: string;
  readonly model: string;
  readonly score: number | null;
  readonly cost_usd: number;
  readonly recorded_at_us: number;
}

export type { NewOutcome } from './row-change.js';

/**
 * Where the learned routing patterns are kept (part of the store port). The pattern store holds them in
 * memory and routes from there; this is only its durable record, read once at start. Writes are queued
 * with the events of the same tick and may land after the call returns.
 */
export interface PatternRows {
  load(): { fingerprints: StoredFingerprint[]; outcomes: StoredOutcome[] };
  /** Adds an outcome, and its fingerprint when the store does not have it. */
  insertOutcome(outcome: NewOutcome): void;
  deleteRecordedBefore(cutoffUs: number): void;
  /** Deletes the `count` oldest outcomes. */
  deleteOldest(count: number): void;
  deleteAll(): void;
}

/**
 * The writes of the pattern rows, the same on every store: row changes handed to a sink, in order with
 * the events of the same tick (rows are applied in queue order, so the keys run as they did).
 */
export abstract class PatternWrites implements PatternRows {
  constructor(private readonly sink: RowSink) {}

  abstract load(): { fingerprints: StoredFingerprint[]; outcomes: StoredOutcome[] };

  insertOutcome(outcome: NewOutcome): void {
    this.write(`pattern outcome ${outcome.fingerprintId}`, {
      kind: 'pattern.insert',
      rowId: this.sink.nextRowId(),
      fingerprintId: outcome.fingerprintId,
      key: outcome.key,
      featuresJson: outcome.featuresJson,
      model: outcome.model,
      sessionId: outcome.sessionId,
      score: outcome.score,
      costUsd: outcome.costUsd,
      turns: outcome.turns,
      atUs: outcome.atUs,
    });
  }

  deleteRecordedBefore(cutoffUs: number): void {
    this.write('pattern age trim', { kind: 'pattern.deleteRecordedBefore', cutoffUs });
  }

  deleteOldest(count: number): void {
    this.write('pattern cap eviction', { kind: 'pattern.deleteOldest', count });
  }

  deleteAll(): void {
    this.write('pattern clear', { kind: 'pattern.deleteAll' });
  }

  private write(what: string, change: RowChange): void {
    this.sink.write({ what, change });
  }
}

/** The patterns of a SQLite file, read at the call; written through its trace writer when one serves it. */
export class SqlitePatternRows extends PatternWrites {
  constructor(private readonly db: Db) {
    super(sqliteRowSink(db));
  }

  load(): { fingerprints: StoredFingerprint[]; outcomes: StoredOutcome[] } {
    return {
      fingerprints: this.db
        .prepare('SELECT id, key, features_json FROM pattern_fingerprints')
        .all() as StoredFingerprint[],
      outcomes: this.db
        .prepare(
          'SELECT id, fingerprint_id, model, score, cost_usd, recorded_at_us FROM pattern_outcomes ORDER BY id',
        )
        .all() as StoredOutcome[],
    };
  }
}
