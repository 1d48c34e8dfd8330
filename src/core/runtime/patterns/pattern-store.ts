import { createHash } from 'node:crypto';
import type { RuntimeConfig } from '../../config/runtime-schema.js';
import { nowMicros } from '../../events/clock.js';
import type { PatternRows } from '../../store/pattern-rows.js';
import type { Fingerprint, FingerprintFeatures } from './fingerprint.js';

export type PatternOptions = RuntimeConfig['patterns'];

interface Outcome {
  readonly model: string;
  readonly score: number | null;
  readonly costUsd: number;
  readonly atUs: number;
  /** Insertion order, the same as the row id order in `pattern_outcomes`. */
  readonly order: number;
}

interface Entry {
  readonly id: string;
  readonly features: FingerprintFeatures;
  outcomes: Outcome[];
}

export interface PatternAlternative {
  readonly model: string;
  readonly score: number;
  readonly sample_size: number;
}

/** What the pattern store says about a turn's fingerprint (slot 4 of the routing chain). */
export interface PatternAdvice {
  readonly fingerprintId: string | null;
  /** The model to use instead, or null when no model did better often enough. */
  readonly model: string | null;
  readonly confidence: number | null;
  /** Scored outcomes backing `model`. */
  readonly sampleSize: number;
  /** Outcomes considered (the newest `neighbors` of the fingerprint). */
  readonly clusterSize: number;
  readonly alternatives: readonly PatternAlternative[] | null;
  readonly reason: string;
}

export interface RecordInput {
  readonly fingerprint: Fingerprint;
  readonly model: string;
  readonly sessionId: string;
  readonly score: number | null;
  readonly costUsd: number;
  readonly turns: number;
}

export interface Eviction {
  readonly trigger: 'soft_cap_signal' | 'hard_cap_evict' | 'age_trim' | 'manual_clear';
  readonly fingerprints_before: number;
  readonly fingerprints_after: number;
  readonly outcomes_before: number;
  readonly outcomes_after: number;
  readonly entries_evicted: number;
  readonly oldest_evicted_age_days: number | null;
}

export interface Recorded {
  readonly fingerprintId: string;
  readonly wasNew: boolean;
  readonly sampleSizeBefore: number;
  readonly sampleSizeAfter: number;
  readonly overSoftCap: boolean;
  /** A cap this write crossed (a signal, or the oldest outcomes removed). */
  readonly eviction: Eviction | null;
}

interface ModelStats {
  readonly model: string;
  readonly n: number;
  readonly score: number;
  readonly cost: number;
}

const US_PER_DAY = 86_400 * 1_000_000;

/**
 * Outcomes of past turns by fingerprint and model (docs/decisions.md "Pattern routing"), kept in the
 * database and mirrored in memory so that routing reads it without touching storage. Writes go through
 * the trace writer with the events of the same tick. One server owns it: a second process writing the
 * same file's store would not be seen until restart.
 */
export class PatternStore {
  private readonly byKey = new Map<string, Entry>();
  private outcomeCount = 0;
  private nextOrder = 1;

  constructor(
    private readonly rows: PatternRows,
    private readonly options: PatternOptions,
    private readonly now: () => number = nowMicros,
  ) {
    this.load();
  }

  counts(): { fingerprints: number; outcomes: number } {
    return { fingerprints: this.byKey.size, outcomes: this.outcomeCount };
  }

  record(input: RecordInput): Recorded {
    const before = this.counts();
    let entry = this.byKey.get(input.fingerprint.key);
    const wasNew = entry === undefined;
    if (entry === undefined) {
      entry = {
        id: fingerprintIdOf(input.fingerprint.key),
        features: input.fingerprint.features,
        outcomes: [],
      };
      this.byKey.set(input.fingerprint.key, entry);
    }
    const sampleSizeBefore = entry.outcomes.filter((o) => o.model === input.model).length;
    const atUs = this.now();
    entry.outcomes.push({
      model: input.model,
      score: input.score,
      costUsd: input.costUsd,
      atUs,
      order: this.nextOrder++,
    });
    this.outcomeCount += 1;
    const fingerprintId = entry.id;
    const { key, features } = input.fingerprint;
    this.rows.insertOutcome({
      fingerprintId,
      key,
      featuresJson: JSON.stringify(features),
      model: input.model,
      sessionId: input.sessionId,
      score: input.score,
      costUsd: input.costUsd,
      turns: input.turns,
      atUs,
    });
    const overSoftCap = this.outcomeCount > this.options.soft_cap_rows;
    let eviction: Eviction | null = null;
    if (this.outcomeCount > this.options.hard_cap_rows) eviction = this.evictOldest(before);
    else if (overSoftCap) eviction = this.summary('soft_cap_signal', before, 0, null);
    return {
      fingerprintId,
      wasNew,
      sampleSizeBefore,
      sampleSizeAfter: sampleSizeBefore + 1,
      overSoftCap,
      eviction,
    };
  }

  /** Removes outcomes older than `max_age_days`; null when none was. */
  trimAged(): Eviction | null {
    const cutoff = this.now() - this.options.max_age_days * US_PER_DAY;
    const before = this.counts();
    let removed = 0;
    let oldest = Number.POSITIVE_INFINITY;
    for (const [key, entry] of this.byKey) {
      const kept = entry.outcomes.filter((o) => o.atUs >= cutoff);
      for (const o of entry.outcomes) if (o.atUs < cutoff) oldest = Math.min(oldest, o.atUs);
      removed += entry.outcomes.length - kept.length;
      entry.outcomes = kept;
      if (kept.length === 0) this.byKey.delete(key);
    }
    if (removed === 0) return null;
    this.outcomeCount -= removed;
    this.rows.deleteRecordedBefore(cutoff);
    return this.summary('age_trim', before, removed, this.ageDays(oldest));
  }

  /** Forgets every outcome (`manual_clear`). */
  clear(): Eviction {
    const before = this.counts();
    this.byKey.clear();
    this.outcomeCount = 0;
    this.rows.deleteAll();
    return this.summary('manual_clear', before, before.outcomes, null);
  }

  /**
   * Whether similar turns did better on another model than `otherwise` (the model the rest of the
   * chain would use): better by `min_score_gain`, or as good (within 0.02) for `min_cost_saving` less,
   * with at least `min_samples` scored outcomes on both sides.
   */
  advise(key: string, otherwise: string): PatternAdvice {
    const entry = this.byKey.get(key);
    const none = (reason: string, alternatives: PatternAlternative[] | null = null): PatternAdvice => ({
      fingerprintId: entry?.id ?? null,
      model: null,
      confidence: null,
      sampleSize: 0,
      clusterSize: Math.min(entry?.outcomes.length ?? 0, this.options.neighbors),
      alternatives,
      reason,
    });
    if (entry === undefined) return none('no similar turns recorded');
    const cluster = entry.outcomes.slice(-this.options.neighbors);
    const stats = statsByModel(cluster);
    const alternatives = stats.map((s) => ({ model: s.model, score: s.score, sample_size: s.n }));
    const min = this.options.min_samples;
    const base = stats.find((s) => s.model === otherwise);
    if (base === undefined || base.n < min)
      return none(`fewer than ${min} scored similar turns on ${otherwise} to compare with`, alternatives);
    const better = stats
      .filter((s) => s.model !== otherwise && s.n >= min && this.beats(s, base))
      .sort((a, b) => b.score - a.score || a.cost - b.cost)[0];
    if (better === undefined)
      return none(`no model did better than ${otherwise} on ${base.n} similar turns`, alternatives);
    const cheaper = better.score < base.score + this.options.min_score_gain;
    return {
      fingerprintId: entry.id,
      model: better.model,
      confidence: Math.round((better.n / (better.n + min)) * 100) / 100,
      sampleSize: better.n,
      clusterSize: cluster.length,
      alternatives,
      reason: cheaper
        ? `similar turns scored as well on ${better.model} (${better.score}, n=${better.n}) as on ${otherwise} (${base.score}, n=${base.n}) for less`
        : `similar turns scored ${better.score} on ${better.model} (n=${better.n}) vs ${base.score} on ${otherwise} (n=${base.n})`,
    };
  }

  private beats(candidate: ModelStats, base: ModelStats): boolean {
    if (candidate.score >= base.score + this.options.min_score_gain) return true;
    return (
      candidate.score >= base.score - 0.02 && candidate.cost <= base.cost * (1 - this.options.min_cost_saving)
    );
  }

  private evictOldest(before: { fingerprints: number; outcomes: number }): Eviction {
    const excess = this.outcomeCount - this.options.soft_cap_rows;
    const all = [...this.byKey.values()].flatMap((e) => e.outcomes).sort((a, b) => a.order - b.order);
    const evicted = all.slice(0, excess);
    const lastOrder = evicted[evicted.length - 1]!.order;
    for (const [key, entry] of this.byKey) {
      entry.outcomes = entry.outcomes.filter((o) => o.order > lastOrder);
      if (entry.outcomes.length === 0) this.byKey.delete(key);
    }
    this.outcomeCount -= evicted.length;
    this.rows.deleteOldest(evicted.length);
    return this.summary('hard_cap_evict', before, evicted.length, this.ageDays(evicted[0]!.atUs));
  }

  private summary(
    trigger: Eviction['trigger'],
    before: { fingerprints: number; outcomes: number },
    evicted: number,
    oldestAgeDays: number | null,
  ): Eviction {
    // `before` is read ahead of the write that crossed a cap, so a signal counts that write's outcome.
    const after = this.counts();
    return {
      trigger,
      fingerprints_before: before.fingerprints,
      fingerprints_after: after.fingerprints,
      outcomes_before: before.outcomes,
      outcomes_after: after.outcomes,
      entries_evicted: evicted,
      oldest_evicted_age_days: oldestAgeDays,
    };
  }

  private ageDays(atUs: number): number | null {
    if (!Number.isFinite(atUs)) return null;
    return Math.round(((this.now() - atUs) / US_PER_DAY) * 1000) / 1000;
  }

  private load(): void {
    const { fingerprints, outcomes } = this.rows.load();
    const byId = new Map<string, Entry>();
    for (const row of fingerprints) {
      const entry: Entry = { id: row.id, features: JSON.parse(row.features_json), outcomes: [] };
      this.byKey.set(row.key, entry);
      byId.set(row.id, entry);
    }
    for (const row of outcomes) {
      byId.get(row.fingerprint_id)?.outcomes.push({
        model: row.model,
        score: row.score,
        costUsd: row.cost_usd,
        atUs: row.recorded_at_us,
        order: row.id,
      });
      this.nextOrder = row.id + 1;
    }
    this.outcomeCount = outcomes.length;
    for (const [key, entry] of this.byKey) if (entry.outcomes.length === 0) this.byKey.delete(key);
  }
}

/** Mean score and cost per model over scored outcomes, best score first. */
function statsByModel(outcomes: readonly Outcome[]): ModelStats[] {
  const sums = new Map<string, { n: number; score: number; cost: number }>();
  for (const o of outcomes) {
    if (o.score === null) continue;
    const s = sums.get(o.model) ?? { n: 0, score: 0, cost: 0 };
    s.n += 1;
    s.score += o.score;
    s.cost += o.costUsd;
    sums.set(o.model, s);
  }
  return [...sums]
    .map(([model, s]) => ({
      model,
      n: s.n,
      score: Math.round((s.score / s.n) * 1000) / 1000,
      cost: s.cost / s.n,
    }))
    .sort((a, b) => b.score - a.score || a.cost - b.cost);
}

/**
 * A fingerprint's id, from its key: two nodes of a cluster that learn the same pattern make the same row
 * in the store they share, not two rows under one unique key.
 */
export function fingerprintIdOf(key: string): string {
  return `fp_${createHash('sha256').update(key).digest('hex').slice(0, 26).toUpperCase()}`;
}
