import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The local token a `metis serve` child wrote in its METIS_HOME (issue 13: the token is on by
 * default), for tests that talk to the child over HTTP directly rather than through a client command.
 */
export function homeToken(home: string): string {
  return readFileSync(join(home, 'token'), 'utf8').trim();
}

/** `Authorization: Bearer <the home's token>`, to spread into a fetch's headers. */
export function authHeaders(home: string): { authorization: string } {
  return { authorization: `Bearer ${homeToken(home)}` };
}

/**
 * Tokens of the servers `serveCli` started, by base URL, so `jsonRequest(url, …)` authenticates
 * without every call site passing the token along. A server started with `server.auth: none` or its
 * own token has none here.
 */
const tokensByUrl = new Map<string, string>();

export function rememberServerToken(url: string, tokenFile: string): void {
  tokensByUrl.set(url, readFileSync(tokenFile, 'utf8').trim());
}

export function serverToken(url: string): string | undefined {
  return tokensByUrl.get(url);
}
