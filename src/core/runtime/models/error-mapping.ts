import { AdapterError, type ErrorClass } from '../model-adapter.js';

/** What a provider failure means for the loop: its class, a safe message, and whether to retry. */
export interface ClassifiedError {
  readonly errorClass: ErrorClass;
  /** Provider message without the API key; the loop scrubs it further for the trace (bus §10.4). */
  readonly message: string;
  /** Worth another attempt (before the first token only): rate limits, server errors, network. */
  readonly retryable: boolean;
  /** The wait the provider asked for (`retry-after-ms` / `retry-after`), if it did. */
  readonly retryAfterMs: number | null;
}

// biome-ignore lint/suspicious/noExplicitAny: SDK error constructors have differing signatures.
type ErrorConstructor = abstract new (...args: any[]) => Error;

/** The error classes of one SDK; both official SDKs (Stainless-generated) share this layout. */
export interface SdkErrors {
  readonly APIError: ErrorConstructor;
  readonly APIUserAbortError: ErrorConstructor;
  /** Also the base of the SDK's connection-timeout error. */
  readonly APIConnectionError: ErrorConstructor;
}

/** Thrown by an adapter when the provider's stream ended before its terminal event. */
export class StreamIncompleteError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StreamIncompleteError';
  }
}

interface ApiErrorFields {
  readonly status?: number | undefined;
  readonly headers?: { get(name: string): string | null } | undefined;
  readonly type?: string | null | undefined;
  readonly code?: string | null | undefined;
  readonly error?: unknown;
}

const CONTEXT_OVERFLOW =
  /prompt is too long|context[ _-]?(?:length|window)|maximum context|too many (?:input )?tokens|exceeds? the (?:model's )?(?:context|maximum)|input is too long/i;

const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

/** Longest message kept; provider bodies can be large. */
const MAX_MESSAGE = 1000;

/**
 * Maps an SDK failure to `error_class` (bus §6.3):
 *
 *   aborted by the turn's signal                          → cancelled
 *   HTTP 429                                              → rate_limit   (retry, honouring retry-after)
 *   HTTP 401 / 403                                        → auth
 *   HTTP 5xx, 529, in-stream `overloaded_error`/`api_error` → server_error (retry)
 *   HTTP 400/404/413/422 saying the prompt is too long    → context_overflow
 *   other HTTP 400/404/413/422                            → invalid_request
 *   connection refused/reset/timeout, stream cut off      → network      (retry)
 *   anything else                                         → other
 *
 * `secrets` (the API key) are cut out of the message whatever the provider echoed.
 */
export function classifyProviderError(
  error: unknown,
  options: { provider: string; sdk: SdkErrors; signal: AbortSignal; secrets: readonly string[] },
): ClassifiedError {
  const { sdk, signal } = options;
  const rawMessage = error instanceof Error ? error.message : String(error);
  const classified = (errorClass: ErrorClass, retryAfterMs: number | null = null): ClassifiedError => ({
    errorClass,
    message: safeMessage(options.provider, rawMessage, options.secrets),
    retryable: errorClass === 'rate_limit' || errorClass === 'server_error' || errorClass === 'network',
    retryAfterMs,
  });

  if (error instanceof AdapterError) return { ...classified(error.errorClass), retryable: false };
  if (signal.aborted || error instanceof sdk.APIUserAbortError) return classified('cancelled');
  if (error instanceof StreamIncompleteError) return classified('network');
  if (error instanceof sdk.APIConnectionError) return classified('network');
  if (error instanceof sdk.APIError) {
    const fields = error as ApiErrorFields;
    const retryAfterMs = retryAfterOf(fields.headers);
    const status = fields.status;
    if (typeof status === 'number') {
      if (status === 429) return classified('rate_limit', retryAfterMs);
      if (status === 401 || status === 403) return classified('auth');
      if (status === 408) return classified('network', retryAfterMs);
      if (status >= 500) return classified('server_error', retryAfterMs);
      if (status === 400 || status === 404 || status === 413 || status === 422) {
        return classified(mentionsContext(fields, rawMessage) ? 'context_overflow' : 'invalid_request');
      }
      return classified('other');
    }
    // No status: an `error` event inside a stream that began with HTTP 200.
    return classified(inStreamErrorClass(fields, rawMessage), retryAfterMs);
  }
  if (isNetworkError(error)) return classified('network');
  return classified('other');
}

/** Class of an error the provider sent inside a 200 stream, by its `type` (or OpenAI-style `code`). */
function inStreamErrorClass(fields: ApiErrorFields, message: string): ErrorClass {
  const type = `${fields.type ?? ''} ${fields.code ?? ''}`.toLowerCase();
  if (/context_length|context_window/.test(type) || CONTEXT_OVERFLOW.test(message)) return 'context_overflow';
  if (type.includes('rate_limit')) return 'rate_limit';
  if (/authentication|permission|invalid_api_key/.test(type)) return 'auth';
  if (/invalid_request|not_found|request_too_large/.test(type)) return 'invalid_request';
  if (type.includes('timeout')) return 'network';
  // overloaded_error, api_error, server_error and anything unknown: the provider failed mid-answer.
  return 'server_error';
}

function mentionsContext(fields: ApiErrorFields, message: string): boolean {
  const code = `${fields.code ?? ''}`;
  return code === 'context_length_exceeded' || CONTEXT_OVERFLOW.test(message);
}

function isNetworkError(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; current && depth < 5; depth += 1) {
    const candidate = current as { code?: unknown; name?: unknown; message?: unknown; cause?: unknown };
    if (typeof candidate.code === 'string' && NETWORK_CODES.has(candidate.code)) return true;
    // undici: "TypeError: terminated" when the socket closes mid-body, "fetch failed" on connect.
    if (candidate.name === 'TypeError' && /^(terminated|fetch failed)$/.test(String(candidate.message))) {
      return true;
    }
    if (candidate.name === 'SocketError') return true;
    current = candidate.cause;
  }
  return false;
}

/** `retry-after-ms` (milliseconds), else `retry-after` (seconds or an HTTP date), in milliseconds. */
export function retryAfterOf(headers: { get(name: string): string | null } | undefined): number | null {
  if (!headers || typeof headers.get !== 'function') return null;
  const ms = Number.parseFloat(headers.get('retry-after-ms') ?? '');
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const value = headers.get('retry-after');
  if (value === null) return null;
  const seconds = Number(value.trim());
  if (value.trim() !== '' && Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

/** The message with every secret removed and its length capped, prefixed with the provider. */
export function safeMessage(provider: string, message: string, secrets: readonly string[]): string {
  let out = message;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join('[key]');
  }
  if (out.length > MAX_MESSAGE) out = `${out.slice(0, MAX_MESSAGE)}…`;
  return `${provider}: ${out}`;
}
