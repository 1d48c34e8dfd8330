import type { ServerResponse } from 'node:http';
import type { z } from 'zod';
import { MetisError } from '../errors.js';
import { SYSTEM_SESSION_ID } from '../events/envelope.js';
import type { Runtime } from '../runtime/runtime.js';

export const MAX_BODY_BYTES = 1024 * 1024;

/** An HTTP failure with a status and a stable code, answered as `{error: {code, message}}`. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    ...headers,
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
  });
  response.end(text);
}

/**
 * Seconds a client should wait before retrying a storage failure (RFC 9110 Retry-After): the trace
 * writer retries within a second, a lock is usually short, a full disk needs a person.
 */
const RETRY_AFTER_SECONDS: Readonly<Record<string, number>> = {
  METIS_ERR_STORAGE_BUSY: 1,
  METIS_ERR_STORAGE_IO: 2,
  METIS_ERR_STORAGE_FULL: 10,
  METIS_ERR_BUS_OVERFLOW: 1,
  // The server pings an unreachable PostgreSQL store every second and knows within one that it is back.
  METIS_ERR_STORE_UNAVAILABLE: 2,
};

/** The headers of an error answer: `Retry-After` for the codes that have one. */
export function errorHeaders(code: string, extra: Record<string, string> = {}): Record<string, string> {
  const retryAfter = RETRY_AFTER_SECONDS[code];
  return retryAfter === undefined ? { ...extra } : { ...extra, 'retry-after': String(retryAfter) };
}

export function sendError(
  response: ServerResponse,
  status: number,
  code: string,
  message: string,
  extraHeaders: Record<string, string> = {},
): void {
  sendJson(response, status, { error: { code, message } }, errorHeaders(code, extraHeaders));
}

/**
 * Whether a client may name this session: one the runtime has, but never the internal `system` session
 * (the bus's own events: every subscriber's registration with its connection and session ids), which
 * every route answers as unknown (issue 34).
 */
export async function isClientSession(
  runtime: Pick<Runtime, 'knowsSession'>,
  sessionId: string,
): Promise<boolean> {
  return sessionId !== SYSTEM_SESSION_ID && (await runtime.knowsSession(sessionId));
}

/** Validates a body or query with zod; the error names the field and the problem. */
export function validate<S extends z.ZodType>(schema: S, value: unknown, where = 'body'): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw validationError(result.error, where);
}

/** The first problem zod found, naming its field: `message: Too small: expected string to have >=1 characters`. */
export function validationError(error: z.ZodError, where: string): MetisError {
  const issue = error.issues[0]!;
  const field = issue.path.length ? issue.path.join('.') : where;
  return new MetisError('METIS_ERR_INVALID_ARGUMENT', `${field}: ${issue.message}`);
}

/**
 * Starts a server-sent events response: no caching or transforming proxy, and no buffering by nginx,
 * which would hold the events back.
 */
export function writeEventStreamHead(response: ServerResponse, extra: Record<string, string> = {}): void {
  response.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    'x-accel-buffering': 'no',
    ...extra,
  });
}
