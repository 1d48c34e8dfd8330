import { Counter, type Registry } from 'prom-client';
import type { StoreWriter } from '../store/store-writer.js';
import { type EventTally, familyOf, type Tally } from './metrics-tally.js';

/** One plugin as `GET /plugins` lists it; `timeouts` is read when the plugin host counts them. */
export interface PluginMetricsSource {
  readonly name: string;
  readonly failed: number;
  readonly timeouts?: number;
}

/** What the copied-in counters read when scraped, besides the tally. */
export interface SeriesSources {
  readonly writer: StoreWriter;
  readonly plugins?: () => readonly PluginMetricsSource[];
}

const TURN_OUTCOMES = ['completed', 'failed', 'cancelled'];

/**
 * The counters whose values live in an EventTally, the writer's stats or the plugin host: each is
 * copied into prom-client when scraped, so nothing on the hot path touches prom-client.
 */
export function registerEventSeries(registers: Registry[], tally: EventTally, sources: SeriesSources): void {
  tallyCounter(
    registers,
    'metis_events_emitted_total',
    'Events emitted, by type family (catalog domain; `streaming` for live deltas).',
    ['family'],
    (set) => {
      const families = byFamily(tally.emitted, false);
      for (const [family, n] of byFamily(tally.streamed, true)) families.set(family, n);
      for (const [family, n] of families) set({ family }, n);
    },
  );
  tallyCounter(
    registers,
    'metis_events_committed_total',
    'Bus events committed to the trace store, by type family.',
    ['family'],
    (set) => {
      for (const [family, n] of byFamily(tally.committed, false)) set({ family }, n);
    },
  );
  tallyCounter(
    registers,
    'metis_events_dropped_total',
    'Bus events the trace writer gave up on, by type family.',
    ['family'],
    (set) => {
      for (const [family, n] of byFamily(tally.dropped, false)) set({ family }, n);
    },
  );
  tallyCounter(
    registers,
    'metis_trace_write_retries_total',
    'Batch commits retried after a busy database.',
    [],
    (set) => set({}, sources.writer.stats.retries),
  );
  tallyCounter(
    registers,
    'metis_turns_total',
    'Turns ended, by outcome (failed: its last model call failed, or it made none).',
    ['outcome'],
    (set) => {
      for (const outcome of TURN_OUTCOMES) set({ outcome }, 0);
      for (const [outcome, count] of tally.turns.entries()) set({ outcome }, count.n);
    },
  );
  tallyCounter(
    registers,
    'metis_model_calls_total',
    'Model calls ended, by model and outcome (completed, or the error class).',
    ['model', 'outcome'],
    (set) => {
      for (const [key, count] of tally.modelCalls.entries()) {
        const [model, outcome] = key.split('\0') as [string, string];
        set({ model, outcome }, count.n);
      }
    },
  );
  tallyCounter(
    registers,
    'metis_model_tokens_total',
    'Tokens of completed model calls, by model and kind.',
    ['model', 'kind'],
    (set) => {
      for (const [key, count] of tally.tokens.entries()) {
        const [model, kind] = key.split('\0') as [string, string];
        set({ model, kind }, count.n);
      }
    },
  );
  tallyCounter(
    registers,
    'metis_model_cost_usd_total',
    'Cost of completed model calls in US dollars, by model.',
    ['model'],
    (set) => {
      for (const [model, count] of tally.costUsd.entries()) set({ model }, count.n);
    },
  );
  const plugins = sources.plugins ?? (() => []);
  tallyCounter(
    registers,
    'metis_plugin_errors_total',
    'Plugin handler failures, by plugin.',
    ['plugin'],
    (set) => {
      for (const plugin of plugins()) set({ plugin: plugin.name }, plugin.failed);
    },
  );
  tallyCounter(
    registers,
    'metis_plugin_timeouts_total',
    'Plugin calls that overran their timeout, by plugin.',
    ['plugin'],
    (set) => {
      for (const plugin of plugins()) set({ plugin: plugin.name }, plugin.timeouts ?? 0);
    },
  );
}

type SetCount = (labels: Record<string, string>, value: number) => void;

/** A counter whose value lives elsewhere and is copied in, label set by label set, when scraped. */
function tallyCounter(
  registers: Registry[],
  name: string,
  help: string,
  labelNames: string[],
  read: (set: SetCount) => void,
): void {
  new Counter({
    name,
    help,
    labelNames,
    registers,
    collect() {
      this.reset();
      read((labels, value) => this.inc(labels, value));
    },
  });
}

function byFamily(tally: Tally, streaming: boolean): Map<string, number> {
  const families = new Map<string, number>();
  for (const [type, count] of tally.entries()) {
    const family = familyOf(type, streaming);
    families.set(family, (families.get(family) ?? 0) + count.n);
  }
  return families;
}
