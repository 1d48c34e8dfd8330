import type { Db } from './database.js';
import { nextRowId } from './row-ids.js';
import { writerOf } from './trace-writer.js';

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
    this.write(`pattern outcome ${outcome.fingerprintId}`, () => {
      this.db
        .prepare(
          `INSERT OR IGNORE INTO pattern_fingerprints (id, key, kind, features_json, created_at_us)
           VALUES (?, ?, 'structural', ?, ?)`,
        )
        .run(outcome.fingerprintId, outcome.key, outcome.featuresJson, outcome.atUs);
      this.db
        .prepare(
          `INSERT INTO pattern_outcomes (id, fingerprint_id, model, session_id, score, cost_usd, turns, recorded_at_us)
           VALUES (?, (SELECT id FROM pattern_fingerprints WHERE key = ?), ?, ?, ?, ?, ?, ?)`,
        )
        .run(
          nextRowId(this.db),
          outcome.key,
          outcome.model,
          outcome.sessionId,
          outcome.score,
          outcome.costUsd,
          outcome.turns,
          outcome.atUs,
        );
    });
  }

  deleteRecordedBefore(cutoffUs: number): void {
    this.write('pattern age trim', () => {
      this.db.prepare('DELETE FROM pattern_outcomes WHERE recorded_at_us < ?').run(cutoffUs);
      this.deleteEmptyFingerprints();
    });
  }

  deleteOldest(count: number): void {
    this.write('pattern cap eviction', () => {
      this.db
        .prepare(
          'DELETE FROM pattern_outcomes WHERE id IN (SELECT id FROM pattern_outcomes ORDER BY id LIMIT ?)',
        )
        .run(count);
      this.deleteEmptyFingerprints();
    });
  }

  deleteAll(): void {
    this.write('pattern clear', () => {
      this.db.prepare('DELETE FROM pattern_outcomes').run();
      this.db.prepare('DELETE FROM pattern_fingerprints').run();
    });
  }

  private deleteEmptyFingerprints(): void {
    this.db
      .prepare(
        'DELETE FROM pattern_fingerprints WHERE id NOT IN (SELECT DISTINCT fingerprint_id FROM pattern_outcomes)',
      )
      .run();
  }

  /** With the events of the same tick when a trace writer serves the file; at once otherwise. */
  private write(what: string, run: () => void): void {
    const writer = writerOf(this.db);
    if (writer === undefined) run();
    else writer.writeRow({ what, run });
  }
}
