import type { PayloadOf } from '../../../events/catalog/index.js';

/** One entry of `RUN_FINISHED.usage` (`@ag-ui/core` TokenUsage): one provider and model. */
interface TokenUsage {
  provider: string;
  model: string;
  inputTokens: number;
  outputTokens: number;
  totalTokens: number;
  cachedInputTokens: number;
  cacheWriteInputTokens: number;
}

/**
 * The model calls a run made, added up per provider and model (`llm.call_completed`), as AG-UI's
 * `usage` counts them: its input tokens include those read from and written to a cache, which metis
 * counts apart (`input_tokens` is disjoint from both). A run that continues a turn counts only its own
 * calls, as the protocol asks. The cost, which TokenUsage has no field for, goes in `result`.
 */
export class RunUsage {
  private readonly byModel = new Map<string, TokenUsage>();
  private costUsd = 0;
  private calls = 0;

  add(call: PayloadOf<'llm.call_completed'>): void {
    const key = `${call.provider}\u0000${call.model}`;
    const entry = this.byModel.get(key) ?? {
      provider: String(call.provider),
      model: String(call.model),
      inputTokens: 0,
      outputTokens: 0,
      totalTokens: 0,
      cachedInputTokens: 0,
      cacheWriteInputTokens: 0,
    };
    const cached = count(call.cached_input_tokens);
    const written = count(call.cache_creation_input_tokens);
    const input = count(call.input_tokens) + cached + written;
    const output = count(call.output_tokens);
    entry.inputTokens += input;
    entry.outputTokens += output;
    entry.totalTokens += input + output;
    entry.cachedInputTokens += cached;
    entry.cacheWriteInputTokens += written;
    this.byModel.set(key, entry);
    this.costUsd += call.cost_usd;
    this.calls += 1;
  }

  entries(): TokenUsage[] {
    return [...this.byModel.values()].map((entry) => ({ ...entry }));
  }

  /** The run's cost and calls, for `result`. */
  summary(): { cost_usd: number; model_calls: number } {
    return { cost_usd: this.costUsd, model_calls: this.calls };
  }
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : 0;
}
