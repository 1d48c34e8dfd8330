import type { GatewayError, GatewayErrorKind } from '../gateway-error.js';

/** OpenAI's error `type` and `code` of each kind (what its SDK shows as `error.type`, `error.code`). */
const OPENAI: Record<GatewayErrorKind, { type: string; code: string | null }> = {
  invalid_request: { type: 'invalid_request_error', code: null },
  authentication: { type: 'invalid_request_error', code: 'invalid_api_key' },
  permission: { type: 'invalid_request_error', code: 'model_not_allowed' },
  not_found: { type: 'invalid_request_error', code: 'model_not_found' },
  rate_limit: { type: 'requests', code: 'rate_limit_exceeded' },
  quota: { type: 'insufficient_quota', code: 'insufficient_quota' },
  upstream: { type: 'server_error', code: 'upstream_error' },
  overloaded: { type: 'server_error', code: 'overloaded' },
  internal: { type: 'server_error', code: null },
};

/** Anthropic's error `type` of each kind. */
const ANTHROPIC: Record<GatewayErrorKind, string> = {
  invalid_request: 'invalid_request_error',
  authentication: 'authentication_error',
  permission: 'permission_error',
  not_found: 'not_found_error',
  rate_limit: 'rate_limit_error',
  quota: 'rate_limit_error',
  upstream: 'api_error',
  overloaded: 'overloaded_error',
  internal: 'api_error',
};

export function openaiErrorBody(error: GatewayError): unknown {
  const { type, code } = OPENAI[error.kind];
  return { error: { message: error.message, type, param: error.param, code } };
}

export function anthropicErrorBody(error: GatewayError): unknown {
  return { type: 'error', error: { type: ANTHROPIC[error.kind], message: error.message } };
}
