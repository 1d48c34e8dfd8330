import type { RuntimeConfig } from '../config/runtime-schema.js';
import { MetisError } from '../errors.js';
import type { ModelResolution } from '../runtime/models/model-registry.js';
import { resolveProviders } from '../runtime/models/providers.js';

type Refused = Extract<ModelResolution, { ok: false }>;

/**
 * Why `metis serve` will not start on a default model no provider can serve, naming what to fix: the
 * adapter's own reason ("no API key: $ANTHROPIC_API_KEY is not set") and, for a missing key, how to
 * set it, as `metis doctor` says it. "Not configured" alone (issue 29 obs. D) left the user to guess
 * between an unknown provider and a key, and which variable.
 */
export function defaultModelRefusal(
  config: RuntimeConfig,
  refused: Refused,
  env: NodeJS.ProcessEnv = process.env,
): MetisError {
  const model = config.default_model;
  const providerName = model.slice(0, model.indexOf(':'));
  const provider = resolveProviders(config, env).find((p) => p.name === providerName);
  const keySource = provider?.requiresKey && provider.apiKey === null ? provider.keySource : null;
  const reason =
    refused.detail ??
    (keySource !== null
      ? `no API key: ${keySource} is not set`
      : 'its provider is not configured (an unknown provider, or no API key)');
  const message = `default model "${model}" cannot serve turns (${refused.failure}): ${reason}`;
  if (keySource === null) return new MetisError('METIS_ERR_INVALID_MODEL', message);
  const setIt = keySource.startsWith('$')
    ? `export ${keySource.slice(1)}=… before metis serve`
    : `Set ${keySource}`;
  return new MetisError('METIS_ERR_INVALID_MODEL', message, {
    hint: `${setIt}, or serve another model with --model (metis doctor checks every provider).`,
  });
}
