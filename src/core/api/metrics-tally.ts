import type { EventBus } from '../bus/event-bus.js';
import type { SubscriptionHandle } from '../bus/subscription.js';
import { CATALOG } from '../events/catalog/index.js';
import type { MetisEvent } from '../events/envelope.js';
import type { StreamingChannel } from '../runtime/streaming-channel.js';
import type { BatchReport, StoreWriter } from '../store/store-writer.js';

/** A plain number behind a stable reference: the hot path does one map lookup and one increment. */
interface Count {
  n: number;
}

/** Counts keyed by a few strings (an event type, a model): the key set stays small (catalog, config). */
export class Tally {
  private readonly counts = new Map<string, Count>();

  add(key: string, amount = 1): void {
    let count = this.counts.get(key);
    if (count === undefined) {
      count = { n: 0 };
      this.counts.set(key, count);
    }
    count.n += amount;
  }

  entries(): IterableIterator<[string, Count]> {
    return this.counts.entries();
  }
}

/** The family an event type is reported under: its catalog domain, or `streaming` for deltas. */
export function familyOf(type: string, streaming: boolean): string {
  if (streaming) return 'streaming';
  return CATALOG.get(type)?.domain ?? (type.split('.')[0] || 'unknown');
}

export type TurnOutcome = 'completed' | 'failed' | 'cancelled';

/** Events whose payloads the metrics read: turn outcomes and model calls. */
const OBSERVED_TYPES = ['turn.completed', 'turn.cancelled', 'llm.call_completed', 'llm.call_failed'];
/** Distinct `model` label values before the rest are counted as `other`. */
export const MAX_MODEL_LABELS = 64;

/**
 * What the metrics learn from events, with as little coupling as possible: `bus.onEmit` and the
 * streaming channel for what is emitted, the writer's `onBatch` for what is committed or dropped, and a
 * fast-path subscriber for the four event types whose payloads say how turns and model calls went.
 * Every hook only increments plain numbers keyed by event type or model; labels, families and the text
 * format are worked out at scrape time (metrics.ts), so emit and enqueue stay cheap.
 */
export class EventTally {
  /** Keyed by event type. */
  readonly emitted = new Tally();
  readonly streamed = new Tally();
  readonly committed = new Tally();
  readonly dropped = new Tally();
  readonly turns = new Tally();
  /** Keyed by `model\0outcome`; outcome is `completed` or the failure's error class. */
  readonly modelCalls = new Tally();
  /** Keyed by `model\0kind` (input, output, cached_input, cache_creation_input). */
  readonly tokens = new Tally();
  /** Keyed by model. */
  readonly costUsd = new Tally();
  /** Turns whose latest model call failed: a `turn.completed` after one is a failed turn (§9.1). */
  private readonly lastCallFailed = new Set<string>();
  private readonly modelLabels = new Set<string>();
  private readonly detachers: (() => void)[] = [];
  private readonly subscription: SubscriptionHandle;

  constructor(
    private readonly bus: EventBus,
    writer: StoreWriter,
    streaming: StreamingChannel,
    onBatch: (report: BatchReport) => void,
  ) {
    this.detachers.push(bus.onEmit((event) => this.emitted.add(event.type)));
    this.detachers.push(streaming.subscribe((event) => this.streamed.add(event.type)));
    this.detachers.push(
      writer.onBatch((report) => {
        const tally = report.outcome === 'committed' ? this.committed : this.dropped;
        for (const event of report.events) tally.add(event.type);
        onBatch(report);
      }),
    );
    this.subscription = bus.subscribe({
      name: 'metrics',
      fastPath: true,
      filter: { event_types: OBSERVED_TYPES },
      handler: (event) => this.observe(event),
    });
  }

  close(): void {
    for (const detach of this.detachers) detach();
    this.detachers.length = 0;
    this.bus.unsubscribe(this.subscription, 'shutdown');
  }

  /**
   * The `model` label: a client may name any model (scripted:anything, any name an OpenAI-compatible
   * server accepts), so past MAX_MODEL_LABELS distinct names the rest share `other` and a client cannot
   * grow the series without bound.
   */
  private modelLabel(model: unknown): string {
    const name = String(model);
    if (this.modelLabels.has(name)) return name;
    if (this.modelLabels.size >= MAX_MODEL_LABELS) return 'other';
    this.modelLabels.add(name);
    return name;
  }

  private observe(event: MetisEvent): void {
    const p = event.payload;
    const turnId = event.turn_id ?? '';
    switch (event.type) {
      case 'llm.call_completed': {
        const model = this.modelLabel(p.model);
        this.lastCallFailed.delete(turnId);
        this.modelCalls.add(`${model}\0completed`);
        this.tokens.add(`${model}\0input`, Number(p.input_tokens) || 0);
        this.tokens.add(`${model}\0output`, Number(p.output_tokens) || 0);
        this.tokens.add(`${model}\0cached_input`, Number(p.cached_input_tokens) || 0);
        this.tokens.add(`${model}\0cache_creation_input`, Number(p.cache_creation_input_tokens) || 0);
        this.costUsd.add(model, Number(p.cost_usd) || 0);
        return;
      }
      case 'llm.call_failed':
        this.lastCallFailed.add(turnId);
        this.modelCalls.add(`${this.modelLabel(p.model)}\0${String(p.error_class)}`);
        return;
      case 'turn.completed': {
        // The client's rule (follow-turn.ts): a turn whose last call failed, that made none, or that the
        // runtime marked failed (signals_extra.failure: an internal error, a crash), failed.
        const extra = p.signals_extra as { failure?: unknown } | null | undefined;
        const failed =
          this.lastCallFailed.delete(turnId) || p.llm_call_count === 0 || typeof extra?.failure === 'string';
        this.turns.add(failed ? 'failed' : 'completed');
        return;
      }
      case 'turn.cancelled':
        this.lastCallFailed.delete(turnId);
        this.turns.add('cancelled');
        return;
    }
  }
}
