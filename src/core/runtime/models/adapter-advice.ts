import { apiModelName } from './conversation.js';
import type { ClassifiedError } from './error-mapping.js';

/** What a provider adapter knows about where its key and its server are, to say what to check. */
export interface ProviderWhereabouts {
  /** Where the key comes from (`$OPENAI_API_KEY`, `providers.x.api_key in the config`), or null. */
  readonly keySource: string | null;
  /** The API base URL the SDK calls. */
  readonly baseUrl: string;
}

/** Why an adapter's `validate()` refused `model`: the missing key and where to put it, or the bad name. */
export function explainRefusal(
  model: string,
  missingKey: boolean,
  where: ProviderWhereabouts,
): string | null {
  if (apiModelName(model) === '') return `no model name after "${model}"`;
  if (!missingKey) return null;
  return where.keySource === null
    ? 'no API key configured for this provider'
    : `no API key: ${where.keySource} is not set`;
}

/**
 * A classified failure whose message says what to check (issue 17 obs. 5): the key's source for an
 * `auth` failure, the URL for a `network` one ("Connection error" alone names nothing).
 */
export function withAdvice(classified: ClassifiedError, where: ProviderWhereabouts): ClassifiedError {
  if (classified.errorClass === 'auth' && where.keySource !== null)
    return { ...classified, message: `${classified.message} (check the key in ${where.keySource})` };
  if (classified.errorClass === 'network')
    return { ...classified, message: `${classified.message} (calling ${where.baseUrl})` };
  return classified;
}
