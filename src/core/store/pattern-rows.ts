import type { Db } from './database.js';
import type { NewOutcome, RowChange } from './row-change.js';
import { nextRowId } from './row-ids.js';
import { writeRow } from './trace-writer.js';

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

export class SqlitePatternRows implements PatternRows {
  constructor(private readonly db: Db) {}

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

  insertOutcome(outcome: NewOutcome): void {
    this.write(`pattern outcome ${outcome.fingerprintId}`, {
      kind: 'pattern.insert',
      // Taken now, in queue order: rows are applied in that order, so the keys run as they did.
      rowId: nextRowId(this.db),
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

  /** With the events of the same tick when a trace writer serves the file; at once otherwise. */
  private write(what: string, change: RowChange): void {
    writeRow(this.db, { what, change });
  }
}
