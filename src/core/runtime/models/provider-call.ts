import type { AdapterChunk, AdapterResult } from '../model-adapter.js';
import { type ProviderWhereabouts, withAdvice } from './adapter-advice.js';
import { classifyProviderError, type SdkErrors } from './error-mapping.js';
import { DEFAULT_RETRY_POLICY, type RetryPolicy, streamWithRetries } from './retry.js';

/** What an SDK adapter is configured with about retries: the config's policy and `max_retries`. */
export interface RetryOptions {
  readonly retryPolicy?: Partial<RetryPolicy>;
  readonly maxRetries?: number;
}

/** The defaults, overridden by the config's policy, overridden by its `max_retries`. */
export function adapterRetryPolicy(options: RetryOptions): RetryPolicy {
  return {
    ...DEFAULT_RETRY_POLICY,
    ...options.retryPolicy,
    ...(options.maxRetries !== undefined ? { maxRetries: options.maxRetries } : {}),
  };
}

/**
 * One model call through a provider's SDK, as every SDK adapter makes it: `attempt` retried before its
 * first chunk (the SDK itself retries nothing), each failure classified with the SDK's error classes,
 * the key scrubbed from messages, and advice on where the key or the endpoint came from.
 */
export function streamProviderCall(call: {
  readonly provider: string;
  readonly sdk: SdkErrors;
  readonly policy: RetryPolicy;
  readonly apiKey: string | null;
  readonly whereabouts: () => ProviderWhereabouts;
  readonly signal: AbortSignal;
  readonly attempt: () => AsyncGenerator<AdapterChunk, AdapterResult, void>;
}): AsyncGenerator<AdapterChunk, AdapterResult, void> {
  const secrets = call.apiKey === null ? [] : [call.apiKey];
  return streamWithRetries({
    policy: call.policy,
    signal: call.signal,
    attempt: call.attempt,
    classify: (error) =>
      withAdvice(
        classifyProviderError(error, {
          provider: call.provider,
          sdk: call.sdk,
          signal: call.signal,
          secrets,
        }),
        call.whereabouts(),
      ),
  });
}
