import { MetisError } from '../core/errors.js';

/** A JSON request to a running server; failures become errors with the server's message. */
export async function apiRequest(
  url: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<Record<string, any>> {
  let response: Response;
  try {
    response = await fetch(`${url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new MetisError(
      'METIS_ERR_SERVER_UNREACHABLE',
      `cannot reach a metis server at ${url}: ${(error as Error).cause ?? (error as Error).message}`,
    );
  }
  const parsed = (await response.json().catch(() => ({}))) as Record<string, any>;
  if (!response.ok) {
    const code = parsed.error?.code ?? `HTTP ${response.status}`;
    throw new MetisError(
      'METIS_ERR_REQUEST_FAILED',
      `${parsed.error?.message ?? 'request failed'} (${code})`,
    );
  }
  return parsed;
}
