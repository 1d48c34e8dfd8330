import { MetisError } from '../../errors.js';
import type { ModelRegistry } from './model-registry.js';

const MODEL_ID = /^[a-z0-9-]+:\S+$/;

export function assertModelId(model: string, field: string): void {
  if (!MODEL_ID.test(model)) {
    throw new MetisError(
      'METIS_ERR_INVALID_MODEL',
      `${field}: "${model}" is not a model id of the form provider:name`,
    );
  }
}

/**
 * A model a session keeps (created with it, or pinned): unlike a one-message override, which the router
 * may reject and record in `route.decided`, it must have a configured provider, or every turn of the
 * session would silently run elsewhere. A provider only marked unavailable for now is accepted.
 */
export function assertConfiguredModel(models: ModelRegistry, model: string, field: string): void {
  assertModelId(model, field);
  const resolution = models.resolve(model);
  if (!resolution.ok && resolution.failure === 'not_configured') {
    throw new MetisError(
      'METIS_ERR_INVALID_MODEL',
      `${field}: "${model}" cannot serve turns: ${resolution.detail ?? 'its provider is not configured (an unknown provider, or no API key)'}`,
    );
  }
}
