import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runtimeConfig } from '../../src/core/config/runtime-schema.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import type { ScoredSession } from '../../src/core/runtime/evaluator/evaluator.js';
import { fingerprintOf } from '../../src/core/runtime/patterns/fingerprint.js';
import { PatternRecorder } from '../../src/core/runtime/patterns/pattern-recorder.js';
import {
  fingerprintIdOf,
  type PatternOptions,
  PatternStore,
} from '../../src/core/runtime/patterns/pattern-store.js';
import { openDatabase } from '../../src/core/store/database.js';
import { SqlitePatternRows } from '../../src/core/store/pattern-rows.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/** Issue 18 point 5: the pattern store's caps, age trim and advice, on a real database file. */

const DAY_US = 86_400_000_000;
const options = (overrides: Partial<PatternOptions> = {}): PatternOptions => ({
  ...runtimeConfig().patterns,
  min_samples: 2,
  ...overrides,
});
const shape = fingerprintOf('hello there', false, 'abcdef012345');

function record(store: PatternStore, model: string, score: number, costUsd = 0.01) {
  return store.record({ fingerprint: shape, model, sessionId: 'sess_x', score, costUsd, turns: 1 });
}

describe('the pattern store', () => {
  it('advises another model only with enough samples on both sides, for a better score or a lower cost', () => {
    const { db } = tempTraceContext();
    const store = new PatternStore(new SqlitePatternRows(db), options());
    expect(store.advise(shape.key, 'scripted:a')).toMatchObject({
      model: null,
      reason: 'no similar turns recorded',
    });
    record(store, 'scripted:a', 0.5);
    record(store, 'scripted:b', 0.9);
    record(store, 'scripted:b', 0.9);
    // One sample of the model in use: nothing to compare with.
    expect(store.advise(shape.key, 'scripted:a').model).toBeNull();
    record(store, 'scripted:a', 0.5);
    expect(store.advise(shape.key, 'scripted:a')).toMatchObject({
      model: 'scripted:b',
      confidence: 0.5,
      sampleSize: 2,
      clusterSize: 4,
    });
    // Asked about b, a is worse: no advice.
    expect(store.advise(shape.key, 'scripted:b').model).toBeNull();
    // As good for a fifth of the price.
    const cheap = new PatternStore(tempTraceContext().port.patterns, options());
    for (let i = 0; i < 2; i += 1) {
      record(cheap, 'scripted:dear', 0.8, 0.05);
      record(cheap, 'scripted:cheap', 0.79, 0.01);
    }
    expect(cheap.advise(shape.key, 'scripted:dear').model).toBe('scripted:cheap');
    expect(cheap.advise(shape.key, 'scripted:dear').reason).toContain('for less');
  });

  it('signals over the soft cap, evicts the oldest over the hard cap, and a new store reads what is left', () => {
    const dir = tempDir();
    const path = join(dir, 'metis.db');
    const db = openDatabase(path, { create: true });
    const store = new PatternStore(
      new SqlitePatternRows(db),
      options({ soft_cap_rows: 3, hard_cap_rows: 4 }),
    );
    const evictions = [1, 2, 3, 4, 5].map(
      (i) => record(store, i % 2 ? 'scripted:a' : 'scripted:b', i / 10).eviction,
    );
    expect(evictions.slice(0, 3)).toEqual([null, null, null]);
    expect(evictions[3]).toMatchObject({ trigger: 'soft_cap_signal', entries_evicted: 0, outcomes_after: 4 });
    expect(evictions[4]).toMatchObject({
      trigger: 'hard_cap_evict',
      outcomes_before: 4,
      outcomes_after: 3,
      entries_evicted: 2,
    });
    expect(db.prepare('SELECT score FROM pattern_outcomes ORDER BY id').pluck().all()).toEqual([
      0.3, 0.4, 0.5,
    ]);
    db.close();
    const reopened = new PatternStore(new SqlitePatternRows(openDatabase(path)), options());
    expect(reopened.counts()).toEqual({ fingerprints: 1, outcomes: 3 });
  });

  it('trims outcomes past max_age_days when a session is recorded, in the system session', async () => {
    const context = tempTraceContext();
    const events: MetisEvent[] = [];
    context.bus.onEmit((e) => events.push(e));
    let now = 1_000 * DAY_US;
    const store = new PatternStore(context.port.patterns, options({ max_age_days: 30 }), () => now);
    record(store, 'scripted:a', 1);
    now += 31 * DAY_US;
    record(store, 'scripted:a', 1);
    const recorder = new PatternRecorder(store, context.bus, context.port, 'v1');
    const scored: ScoredSession = {
      evidence: {
        sessionId: 'sess_gone',
        endEventId: 'evt_x',
        disposition: 'completed',
        turns: [],
        implicit: [],
        rating: null,
      },
      turnScores: new Map(),
      sessionScore: null,
    };
    await recorder.record(scored);
    const trim = events.find((e) => e.type === 'pattern.evicted')!;
    expect(trim).toMatchObject({
      session_id: 'system',
      parent_event_id: null,
      payload: {
        trigger: 'age_trim',
        outcomes_before: 2,
        outcomes_after: 1,
        entries_evicted: 1,
        oldest_evicted_age_days: 31,
      },
    });
    expect(context.db.prepare('SELECT count(*) FROM pattern_outcomes').pluck().get()).toBe(1);
  });
});

describe('fingerprint ids', () => {
  it('come from the key: two stores that learn one pattern name it alike (a cluster shares one store)', () => {
    const ids = [0, 1].map(() => {
      const { db } = tempTraceContext();
      const store = new PatternStore(new SqlitePatternRows(db), options());
      return record(store, 'scripted:demo', 1).fingerprintId;
    });
    expect(ids[0]).toBe(ids[1]);
    expect(ids[0]).toBe(fingerprintIdOf(shape.key));
    expect(ids[0]).toMatch(/^fp_[0-9A-F]{26}$/);
    expect(fingerprintIdOf(`${shape.key}x`)).not.toBe(ids[0]);
  });
});
