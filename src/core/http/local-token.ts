import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, fstatSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { MetisConfig } from '../config/schema.js';
import { MetisError } from '../errors.js';
import { metisHome } from '../store/paths.js';

/**
 * The local token (issue 13, observation 2): on a loopback bind every account on the machine can reach
 * the port, so the server is locked by default with a token only its own account can read, the way
 * Jupyter does it. Clients on the same account read the same file and need no flag.
 */

/** The token file of a metis home: `$METIS_HOME/token`. */
export function tokenFilePath(env: NodeJS.ProcessEnv = process.env): string {
  return join(metisHome(env), 'token');
}

/** Reads of an empty token file (a creator between its create and its write) before giving up, 10 ms apart. */
const MAX_EMPTY_READS = 100;

/** Shortest token accepted from config, the environment or the token file. */
export const MIN_TOKEN_LENGTH = 16;

/** How a server authenticates, as the banner says it (never the token itself). */
export type ServerAuth =
  | {
      readonly mode: 'token';
      readonly token: string;
      /** Where the token came from. */
      readonly source: 'config' | 'env' | 'file';
      /** The token file, when `source` is `file`. */
      readonly tokenFile: string | null;
      /** Set when the deprecated `METIS_BEARER_TOKEN` was read: a line for the log. */
      readonly deprecation: string | null;
    }
  | { readonly mode: 'none'; readonly token: null; readonly source: 'none'; readonly tokenFile: null };

/**
 * The bearer token from the environment: `METIS_TOKEN`, the variable every client command reads, or
 * the older `METIS_BEARER_TOKEN`. Held to the config's rule (16 characters at least): a weak token must
 * not open a non-loopback bind just because it came from the environment.
 * @throws MetisError METIS_ERR_CONFIG_INVALID naming the variable
 */
export function bearerTokenFromEnv(env: NodeJS.ProcessEnv = process.env): {
  token: string;
  variable: 'METIS_TOKEN' | 'METIS_BEARER_TOKEN';
} | null {
  for (const variable of ['METIS_TOKEN', 'METIS_BEARER_TOKEN'] as const) {
    const value = env[variable];
    if (!value) continue;
    if (value.length < MIN_TOKEN_LENGTH) {
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        `${variable}: must be at least ${MIN_TOKEN_LENGTH} characters (it has ${value.length})`,
        { hint: `Use a long random token, e.g. METIS_TOKEN=$(openssl rand -hex 24).` },
      );
    }
    return { token: value, variable };
  }
  return null;
}

/**
 * The server's authentication, in order: `server.auth: none` (loopback only), `server.bearer_token`,
 * `$METIS_TOKEN` (or the deprecated `$METIS_BEARER_TOKEN`), else the token file, created at first start.
 * @throws MetisError METIS_ERR_CONFIG_INVALID for `auth: none` on a non-loopback bind, a weak token in
 *   the environment, or a token file others can read
 */
export function resolveServerAuth(
  server: Pick<MetisConfig['server'], 'auth' | 'bearer_token'>,
  options: { loopback: boolean; tokenFile: string; env?: NodeJS.ProcessEnv },
): ServerAuth {
  const env = options.env ?? process.env;
  if (server.auth === 'none' && server.bearer_token === null) {
    if (!options.loopback) {
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        'server.auth: "none" is only allowed on a loopback address; a non-loopback bind needs a token',
        { hint: 'Remove server.auth: none, or bind 127.0.0.1.' },
      );
    }
    return { mode: 'none', token: null, source: 'none', tokenFile: null };
  }
  if (server.bearer_token !== null) {
    return {
      mode: 'token',
      token: server.bearer_token,
      source: 'config',
      tokenFile: null,
      deprecation: null,
    };
  }
  const fromEnv = bearerTokenFromEnv(env);
  if (fromEnv !== null) {
    const deprecation =
      fromEnv.variable === 'METIS_BEARER_TOKEN'
        ? 'METIS_BEARER_TOKEN is deprecated: name it METIS_TOKEN, the variable client commands read too'
        : null;
    return { mode: 'token', token: fromEnv.token, source: 'env', tokenFile: null, deprecation };
  }
  return {
    mode: 'token',
    token: readOrCreateTokenFile(options.tokenFile),
    source: 'file',
    tokenFile: options.tokenFile,
    deprecation: null,
  };
}

/** Refuses a token file that group or others can read, as ssh refuses such a private key. */
function assertPrivate(path: string, mode: number): void {
  if ((mode & 0o077) !== 0) {
    throw new MetisError(
      'METIS_ERR_CONFIG_INVALID',
      `token file ${path} is readable by other users (mode ${(mode & 0o777).toString(8)}); refusing to use it`,
      { hint: `Run \`chmod 600 ${path}\`, or delete it and metis serve makes a new one.` },
    );
  }
}

/**
 * The token in `path`, created when missing: 32 random bytes (base64url), mode 0600, in a 0700 folder.
 * `wx` makes creation atomic: of two servers starting at once one writes, the other reads its token.
 */
export function readOrCreateTokenFile(path: string, attempt = 0): string {
  const existing = readTokenFile(path);
  if (existing !== undefined) return existing;
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const token = randomBytes(32).toString('base64url');
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    // Another server created it between our read and our create: use its token once it is written.
    // A file left empty for good (a creator killed before its write) must not loop for ever.
    if (attempt >= MAX_EMPTY_READS) {
      throw new MetisError('METIS_ERR_CONFIG_INVALID', `token file ${path} is empty`, {
        hint: `Delete it and metis serve makes a new one.`,
      });
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    return readOrCreateTokenFile(path, attempt + 1);
  }
  try {
    // The umask cannot widen 0600, but a hand-made folder may be wider than 0700: tighten what we own.
    chmodSync(path, 0o600);
    writeSync(fd, `${token}\n`);
  } finally {
    closeSync(fd);
  }
  return token;
}

/**
 * The token in `path`, or undefined when there is no such file (or it is still empty: a creator is
 * between its create and its write).
 * @throws MetisError METIS_ERR_CONFIG_INVALID when group or others can read the file
 */
export function readTokenFile(path: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    throw error;
  }
  try {
    assertPrivate(path, fstatSync(fd).mode);
    const token = readFileSync(fd, 'utf8').trim();
    if (token.length === 0) return undefined;
    // A hand-written short token would be guessable: the same rule as config and the environment.
    if (token.length < MIN_TOKEN_LENGTH) {
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        `token file ${path}: the token must be at least ${MIN_TOKEN_LENGTH} characters (it has ${token.length})`,
        { hint: `Delete it and metis serve makes a new one.` },
      );
    }
    return token;
  } finally {
    closeSync(fd);
  }
}
