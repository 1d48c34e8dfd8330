export type ValidationMode = 'strict' | 'lenient';

/**
 * Strict raises `EventValidationError` at emit; lenient logs at ERROR and drops (bus spec §3.2).
 * `METIS_BUS_VALIDATION` wins; otherwise strict unless `NODE_ENV=production`.
 */
export function validationModeFromEnv(env: NodeJS.ProcessEnv = process.env): ValidationMode {
  const explicit = env.METIS_BUS_VALIDATION;
  if (explicit === 'strict' || explicit === 'lenient') return explicit;
  return env.NODE_ENV === 'production' ? 'lenient' : 'strict';
}
