import { accessSync, constants, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname } from 'node:path';
import type { MetisConfig } from '../core/config/schema.js';
import { isMetisError } from '../core/errors.js';
import { resolveProviders } from '../core/runtime/models/providers.js';
import { openDatabase, schemaVersionOf } from '../core/store/database.js';
import { describeLockOwner, lockOwner } from '../core/store/lock.js';
import { resolveDbPath } from '../core/store/paths.js';
import { postgresClient } from '../core/store/postgres/connect.js';
import { storeStateOf } from '../core/store/postgres/pg-inspect.js';
import { PG_SCHEMA_VERSION } from '../core/store/postgres/schema.js';
import { startupStoreError } from '../core/store/postgres/startup-errors.js';
import { workingCopyPath } from '../core/store/postgres/working-copy.js';
import { SCHEMA_VERSION } from '../core/store/schema.js';
import { redactUrl } from '../core/store/store-copy.js';
import { probe } from './probe.js';
import { configuredUrl } from './server-target.js';
import { pickStore } from './store-option.js';

/** One finding: `problem` fails the doctor (exit 1); `warn` is worth knowing and fails nothing. */
export interface Check {
  readonly name: string;
  readonly status: 'ok' | 'warn' | 'problem';
  readonly detail: string;
  readonly hint?: string;
}

/** The SQLite file `metis serve` opens: the database, or the working copy of the PostgreSQL store. */
function serverFile(config: MetisConfig): string {
  const dbPath = resolveDbPath(config.storage.database);
  try {
    const store = pickStore({}, config.store.url);
    return store === null ? dbPath : workingCopyPath(dirname(dbPath), store.url);
  } catch {
    return dbPath; // a bad store setting is the store check's to report
  }
}

/** Why a probe failed, in a word: the socket error's code, else the message. */
function probeFailure(error: Error): string {
  const cause = error.cause as { code?: string; message?: string } | undefined;
  return cause?.code ?? cause?.message ?? error.message;
}

/**
 * The database: where it is, that it opens with this metis's schema, and who holds it. With a
 * PostgreSQL store set, the file the server runs on is its working copy beside the database file.
 */
export function checkDatabase(config: MetisConfig): Check {
  const path = serverFile(config);
  if (!existsSync(path)) {
    let folder = dirname(path);
    while (!existsSync(folder) && dirname(folder) !== folder) folder = dirname(folder);
    try {
      accessSync(folder, constants.W_OK);
      return { name: 'database', status: 'ok', detail: `${path} (not created yet; ${folder} is writable)` };
    } catch {
      return {
        name: 'database',
        status: 'problem',
        detail: `${path} cannot be created: ${folder} is not writable`,
        hint: 'Set storage.database (or METIS_HOME) to a folder you can write.',
      };
    }
  }
  try {
    const db = openDatabase(path, { readonly: true });
    const version = schemaVersionOf(db);
    db.close();
    const owner = lockOwner(path);
    const holder = owner === null ? '' : `; held by ${describeLockOwner(owner)}`;
    if (version !== SCHEMA_VERSION)
      return {
        name: 'database',
        status: 'problem',
        detail: `${path} has schema version ${version}, this metis reads ${SCHEMA_VERSION}`,
        hint: 'Open it once with `metis serve` to migrate it, or restore a backup made by this version.',
      };
    accessSync(path, constants.W_OK);
    return { name: 'database', status: 'ok', detail: `${path} (schema ${version}${holder})` };
  } catch (error) {
    return {
      name: 'database',
      status: 'problem',
      detail: `${path}: ${(error as Error).message}`,
      ...(isMetisError(error) && error.hint ? { hint: error.hint } : {}),
    };
  }
}

/** The server's address: free to listen on, or already a metis server's. */
export async function checkPort(config: MetisConfig): Promise<Check> {
  const { host, port } = config.server;
  const where = `${host}:${port}`;
  const free = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) => resolve(error));
    probe.listen(port, host, () => probe.close(() => resolve(null)));
  });
  if (free === null) return { name: 'port', status: 'ok', detail: `${where} is free for metis serve` };
  if (free.code === 'EADDRINUSE') {
    const url = configuredUrl(config);
    const answer = await probe(`${url}/healthz`).catch(() => null);
    if (answer?.ok) return { name: 'port', status: 'ok', detail: `a metis server already runs at ${url}` };
    return {
      name: 'port',
      status: 'problem',
      detail: `${where} is in use by another program`,
      hint: 'Set server.port in the config (or pass --port to metis serve).',
    };
  }
  return {
    name: 'port',
    status: 'problem',
    detail: `cannot listen on ${where}: ${free.code ?? free.message}`,
    hint: 'Use an address of this machine (server.host) and a port above 1023.',
  };
}

/**
 * Each provider: its key where one is needed, and, for those that can serve (a key, or none needed),
 * whether its API answers at all. A provider without its key is a problem only when the default model
 * needs it; otherwise it is simply not in use.
 */
export async function checkProviders(
  config: MetisConfig,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Check[]> {
  const defaultProvider = config.runtime.default_model.slice(0, config.runtime.default_model.indexOf(':'));
  const checks: Check[] = [];
  for (const provider of resolveProviders(config.runtime, env)) {
    const name = `provider ${provider.name}`;
    const needed = provider.name === defaultProvider;
    if (provider.requiresKey && provider.apiKey === null) {
      checks.push({
        name,
        status: needed ? 'problem' : 'warn',
        detail: `no API key (${provider.keySource ?? 'none configured'})${needed ? `; the default model ${config.runtime.default_model} needs it` : '; not usable until set'}`,
        hint: provider.keySource?.startsWith('$')
          ? `export ${provider.keySource.slice(1)}=… before metis serve`
          : 'Set its api_key or api_key_env in the config.',
      });
      continue;
    }
    const baseUrl = provider.baseUrl ?? defaultBaseUrl(provider.kind, provider.name);
    if (baseUrl === null) continue;
    const reached = await probe(baseUrl)
      .then(() => null)
      .catch((error: Error) => probeFailure(error));
    checks.push(
      reached === null
        ? { name, status: 'ok', detail: `${baseUrl} answers` }
        : {
            name,
            status: needed ? 'problem' : 'warn',
            detail: `${baseUrl} does not answer (${reached})`,
            hint: 'Is the server running, and is base_url right? (metis config show prints it)',
          },
    );
  }
  return checks;
}

function defaultBaseUrl(kind: string, name: string): string | null {
  if (kind === 'anthropic') return 'https://api.anthropic.com';
  if (name === 'openai') return 'https://api.openai.com/v1';
  return null;
}

/**
 * The PostgreSQL store, when one is set (`$METIS_STORE_URL`, `store.url`): that it answers, which schema
 * it holds, that this user may create or migrate it when it must be, and whether a server holds it (read
 * from pg_locks: taking the lock, even for a moment, could turn a server starting then away). Changes
 * nothing. Null when the server runs on the SQLite file.
 */
export async function checkStore(config: MetisConfig): Promise<Check | null> {
  let picked: ReturnType<typeof pickStore>;
  try {
    picked = pickStore({}, config.store.url);
  } catch (error) {
    return { name: 'store', status: 'problem', detail: (error as Error).message };
  }
  if (picked === null) return null;
  const where = `${redactUrl(picked.url)} (${picked.setting}`;
  const client = postgresClient(picked.url, 'doctor');
  try {
    await client.connect();
    const { version, mayCreate, held } = await storeStateOf(client);
    if (version > PG_SCHEMA_VERSION)
      return {
        name: 'store',
        status: 'problem',
        detail: `${where}) is at schema version ${version}; this metis knows up to ${PG_SCHEMA_VERSION}`,
        hint: 'Run the metis version that wrote it, or point the setting at another database.',
      };
    if (version < PG_SCHEMA_VERSION && !mayCreate)
      return {
        name: 'store',
        status: 'problem',
        detail: `${where}) ${version === 0 ? 'holds no metis store' : `needs a migration to schema ${PG_SCHEMA_VERSION}`} and this user may not create tables there`,
        hint: 'Grant CREATE on the schema, or run metis serve --store once as the owner of the database.',
      };
    const schema =
      version === 0
        ? 'empty: metis serve creates the schema'
        : version < PG_SCHEMA_VERSION
          ? `schema ${version}: metis serve migrates it to ${PG_SCHEMA_VERSION}`
          : `schema ${version}`;
    const holder = held ? '; a metis serve (or a copy, restore or prune) uses it now' : '';
    return { name: 'store', status: 'ok', detail: `${where}; ${schema}${holder})` };
  } catch (error) {
    return {
      name: 'store',
      status: 'problem',
      detail: startupStoreError(error, picked.setting, redactUrl(picked.url)).message,
    };
  } finally {
    await client.end().catch(() => {});
  }
}
