import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import type { StorePort } from '../store/store-port.js';
import { Evaluator } from './evaluator/evaluator.js';
import type { Judge } from './evaluator/judge.js';
import { LlmJudge } from './evaluator/llm-judge.js';
import type { ModelRegistry } from './models/model-registry.js';
import { PatternRecorder } from './patterns/pattern-recorder.js';
import { PatternStore } from './patterns/pattern-store.js';

/** What a runtime learns from its turns: their scores, and the patterns routing reads (each when enabled). */
export interface RuntimeScoring {
  readonly patterns: PatternStore | null;
  readonly patternRecorder: PatternRecorder | null;
  readonly evaluator: Evaluator | null;
}

/**
 * The evaluator and the pattern store as configured, the recorder feeding each scored session to the
 * patterns; the evaluator is attached to the bus. The judge is the one given, else an LLM judge when
 * `evaluator.judge_model` names one, else the heuristic judge.
 */
export function runtimeScoring(options: {
  readonly bus: EventBus;
  readonly config: RuntimeConfig;
  readonly store: StorePort;
  readonly patternRows: StorePort['patterns'];
  readonly models: ModelRegistry;
  readonly logger: Logger;
  readonly judge?: Judge;
}): RuntimeScoring {
  const { bus, config, store } = options;
  const patterns = config.patterns.enabled ? new PatternStore(options.patternRows, config.patterns) : null;
  const patternRecorder =
    patterns === null ? null : new PatternRecorder(patterns, bus, store, config.pricing_version);
  const evaluator = config.evaluator.enabled
    ? new Evaluator({
        bus,
        store,
        logger: options.logger,
        judge:
          options.judge ??
          (config.evaluator.judge_model === null
            ? undefined
            : new LlmJudge(config.evaluator.judge_model, options.models, config)),
        onSessionScored: patternRecorder === null ? undefined : (scored) => patternRecorder.record(scored),
      })
    : null;
  evaluator?.attach();
  return { patterns, patternRecorder, evaluator };
}
