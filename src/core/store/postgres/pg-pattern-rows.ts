import type pg from 'pg';
import { PatternWrites, type StoredFingerprint, type StoredOutcome } from '../pattern-rows.js';
import type { RowSink } from '../session-writes.js';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/**
 * The learned routing patterns of a PostgreSQL store (store-port plan step 8): read once when opened,
 * which is when the pattern store reads them (it routes from memory afterwards), so `load` answers
 * synchronously what the store held then; writes go to the sink as SqlitePatternRows's do, in order
 * with the events of the same tick.
 */
export class PgPatternRows extends PatternWrites {
  private constructor(
    private readonly loaded: { fingerprints: StoredFingerprint[]; outcomes: StoredOutcome[] },
    sink: RowSink,
  ) {
    super(sink);
  }

  /** Reads the store's patterns (in one snapshot, in SQLite's order: outcomes by id). */
  static async open(pool: pg.Pool, sink: RowSink): Promise<PgPatternRows> {
    const result = await pool.query({
      text: `SELECT json_build_object(
               'fingerprints', coalesce((SELECT json_agg(json_build_object('id', id, 'key', key,
                                 'features_json', features_json) ORDER BY id) FROM pattern_fingerprints), '[]'),
               'outcomes', coalesce((SELECT json_agg(json_build_object('id', id, 'fingerprint_id', fingerprint_id,
                                 'model', model, 'score', score, 'cost_usd', cost_usd,
                                 'recorded_at_us', recorded_at_us) ORDER BY id) FROM pattern_outcomes), '[]')
             ) AS patterns`,
      types: BIGINT_AS_NUMBER,
    });
    return new PgPatternRows(
      result.rows[0].patterns as { fingerprints: StoredFingerprint[]; outcomes: StoredOutcome[] },
      sink,
    );
  }

  load(): { fingerprints: StoredFingerprint[]; outcomes: StoredOutcome[] } {
    return { fingerprints: [...this.loaded.fingerprints], outcomes: [...this.loaded.outcomes] };
  }
}
