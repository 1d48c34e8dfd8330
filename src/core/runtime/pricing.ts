import type { RuntimeConfig } from '../config/runtime-schema.js';
import type { TokenUsage } from './model-adapter.js';

/** Cost in USD of one call from the pricing table; an unpriced model costs 0. */
export function costOf(model: string, usage: TokenUsage, config: RuntimeConfig): number {
  const provider = model.slice(0, model.indexOf(':'));
  const price = config.pricing[model] ?? config.pricing[`${provider}:*`];
  if (!price) return 0;
  const cost =
    (usage.input_tokens * price.input_per_mtok +
      usage.output_tokens * price.output_per_mtok +
      usage.cached_input_tokens * price.cached_input_per_mtok +
      usage.cache_creation_input_tokens * price.cache_creation_per_mtok) /
    1_000_000;
  // Round to a millionth of a cent so sums stay stable in JSON.
  return Math.round(cost * 1e8) / 1e8;
}

/** A USD amount as the catalog's decimal string (canonical-message-format §6.4): `"0.0123"`, `"0"`. */
export function usdDecimal(value: number): string {
  return value.toFixed(8).replace(/\.?0+$/, '') || '0';
}

/** A message's usage when no call billed it (a message closed as cut): nothing, at this pricing. */
export function unbilledUsage(pricingVersion: string) {
  return {
    input_tokens: 0,
    output_tokens: 0,
    cached_input_tokens: 0,
    cache_creation_input_tokens: 0,
    cost_usd: 0,
    pricing_version: pricingVersion,
  };
}
