import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { MetisError } from '../errors.js';

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
};

export function sendError(
  response: ServerResponse,
  status: number,
  code: string,
  message: string,
  extraHeaders: Record<string, string> = {},
): void {
  const retryAfter = RETRY_AFTER_SECONDS[code];
  const headers: Record<string, string> =
    retryAfter === undefined ? { ...extraHeaders } : { ...extraHeaders, 'retry-after': String(retryAfter) };
  sendJson(response, status, { error: { code, message } }, headers);
}

/** A 405 with the `Allow` header RFC 9110 §15.5.6 requires: the methods the path does take. */
export function sendMethodNotAllowed(
  response: ServerResponse,
  method: string | undefined,
  path: string,
  allowed: readonly string[],
): void {
  sendError(response, 405, 'METIS_ERR_METHOD_NOT_ALLOWED', `${method} is not allowed on ${path}`, {
    allow: [...new Set(allowed)].sort().join(', '),
  });
}

/** Reads a JSON body: `application/json` only (415), at most 1 MiB (413), valid JSON (400). */
export async function readJson(request: IncomingMessage): Promise<unknown> {
  const type = request.headers['content-type'] ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new HttpError(415, 'METIS_ERR_UNSUPPORTED_MEDIA_TYPE', 'request body must be application/json');
  }
  const declared = Number(request.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES)
    throw new HttpError(413, 'METIS_ERR_BODY_TOO_LARGE', 'request body exceeds 1 MiB');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES)
      throw new HttpError(413, 'METIS_ERR_BODY_TOO_LARGE', 'request body exceeds 1 MiB');
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new HttpError(400, 'METIS_ERR_INVALID_JSON', 'request body is not valid JSON');
  }
}

/** Validates a body or query with zod; the error names the field and the problem. */
export function validate<S extends z.ZodType>(schema: S, value: unknown, where = 'body'): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const field = issue.path.length ? issue.path.join('.') : where;
  throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `${field}: ${issue.message}`);
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
