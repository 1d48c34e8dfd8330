import { serverToken } from './home-token.js';

/**
 * A JSON request against a server's base URL; returns the status and the parsed body (null when empty).
 * Sends the bearer token of a server `serveCli` started (its METIS_HOME token), or `options.token`;
 * `token: null` sends none.
 */
export async function jsonRequest(
  url: string,
  method: string,
  path: string,
  body?: unknown,
  options: { token?: string | null } = {},
): Promise<{ status: number; body: any }> {
  const token = options.token === undefined ? serverToken(url) : options.token;
  const response = await fetch(`${url}${path}`, {
    method,
    headers: {
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}
