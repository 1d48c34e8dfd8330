import { DEFAULT_URL } from '../client/live-text.js';
import { ERROR_TABLE, type ErrorCode, MetisError } from '../core/errors.js';
import { readTokenFile, tokenFilePath } from '../core/http/local-token.js';

/**
 * Where a command finds the server: `--url` (or $METIS_URL) and `--token` (or $METIS_TOKEN, else the
 * local token file `$METIS_HOME/token`).
 */
export interface ServerTarget {
  readonly url: string;
  readonly token?: string;
}

/**
 * The server URL of `--url`, else $METIS_URL, else `fallback`: checked to be http(s) and without a
 * trailing slash, since request paths are appended to it (`http://host:8421/` + `/sessions` would
 * be `//sessions`, which no route matches).
 */
export function serverUrl(option: string | undefined, fallback = DEFAULT_URL): string {
  const fromEnv = process.env.METIS_URL || undefined; // set but empty means unset
  const given = option ?? fromEnv ?? fallback;
  const where = option !== undefined ? '--url' : fromEnv !== undefined ? '$METIS_URL' : 'url';
  let parsed: URL;
  try {
    parsed = new URL(given);
  } catch {
    throw invalidUrl(where, given);
  }
  if ((parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || parsed.search || parsed.hash) {
    throw invalidUrl(where, given);
  }
  return given.replace(/\/+$/, '');
}

function invalidUrl(where: string, given: string): MetisError {
  return new MetisError(
    'METIS_ERR_INVALID_ARGUMENT',
    `${where}: "${given}" is not a server URL like http://127.0.0.1:8421`,
  );
}

/**
 * The bearer token of `--token`, else $METIS_TOKEN, else the local token file `metis serve` writes in
 * `$METIS_HOME` (so clients on the server's account need nothing); undefined when there is none.
 * @throws MetisError METIS_ERR_CONFIG_INVALID when the token file is readable by other users
 */
export function tokenFrom(
  options: { token?: string },
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const given = options.token || env.METIS_TOKEN || undefined;
  if (given !== undefined) return given;
  try {
    return readTokenFile(tokenFilePath(env));
  } catch (error) {
    // Another account's file: this client has no token, and the server will say 401.
    if ((error as NodeJS.ErrnoException).code === 'EACCES') return undefined;
    throw error;
  }
}

/** The error for a server that refused the bearer token (or got none). */
export function unauthorized(url: string, token: string | undefined, message: string): MetisError {
  return new MetisError('METIS_ERR_REQUEST_FAILED', `${message} (METIS_ERR_UNAUTHORIZED)`, {
    hint: token
      ? `The server at ${url} refused this bearer token: check --token, $METIS_TOKEN or $METIS_HOME/token (another server's home?).`
      : `The server at ${url} requires a bearer token: pass --token <token> or set $METIS_TOKEN (clients on the account and METIS_HOME of its metis serve read $METIS_HOME/token by themselves).`,
  });
}

/**
 * A JSON request to a running server (a URL, or a URL with a bearer token); failures become errors
 * with the server's message.
 */
export async function apiRequest(
  target: string | ServerTarget,
  method: string,
  path: string,
  body?: unknown,
): Promise<Record<string, any>> {
  const { url, token } = typeof target === 'string' ? { url: target, token: undefined } : target;
  const headers: Record<string, string> = {};
  // Anything but a read is JSON, even with no body: the server refuses a change a form could send.
  if (body !== undefined || method !== 'GET') headers['content-type'] = 'application/json';
  if (token) headers.authorization = `Bearer ${token}`;
  let response: Response;
  try {
    response = await fetch(`${url}${path}`, {
      method,
      headers,
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
    if (response.status === 401) throw unauthorized(url, token, parsed.error?.message ?? 'unauthorized');
    if (response.status === 429) {
      const wait = response.headers.get('retry-after');
      throw new MetisError(
        'METIS_ERR_TOO_MANY_ATTEMPTS',
        `${parsed.error?.message ?? 'too many attempts'}${wait ? ` (retry after ${wait} s)` : ''}`,
      );
    }
    // The server's own code, when this CLI knows it, brings its hint ("List sessions with ...").
    const known = typeof code === 'string' && Object.hasOwn(ERROR_TABLE, code) ? (code as ErrorCode) : null;
    throw new MetisError(
      known ?? 'METIS_ERR_REQUEST_FAILED',
      `${parsed.error?.message ?? 'request failed'} (${code})`,
    );
  }
  return parsed;
}
