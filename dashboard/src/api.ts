import { accessKey, forgetAccessKey } from './access-key.js';

/**
 * The dashboard's calls to metis's HTTP API (docs/http-api.md). Same origin: the access key travels in
 * the Authorization header (access-key.ts); a 401 means the page must say how to get in.
 */

export class ApiError extends Error {
  constructor(
    /** The HTTP status; 0 when the server could not be reached. */
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  let response: Response;
  try {
    const key = accessKey();
    const changes = method !== 'GET' && method !== 'HEAD';
    response = await fetch(path, {
      method,
      headers: {
        // A request that changes something is JSON, even with no body (the server refuses others).
        ...(changes || body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(key === null ? {} : { authorization: `Bearer ${key}` }),
      },
      body: body === undefined ? (changes ? '{}' : undefined) : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, 'unreachable', 'the server cannot be reached');
  }
  const text = await response.text();
  const parsed = text === '' ? null : safeJson(text);
  if (!response.ok) {
    if (response.status === 401) forgetAccessKey();
    const error = (parsed as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(response.status, error?.code ?? `http_${response.status}`, error?.message ?? text);
  }
  return parsed as T;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

export type * from './api-types.js';
