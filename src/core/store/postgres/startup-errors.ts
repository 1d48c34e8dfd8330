import { MetisError } from '../../errors.js';

/** What went wrong, in an operator's words, for the PostgreSQL (SQLSTATE) and network codes one meets. */
function reasonOf(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = (error as Error).message ?? String(error);
  switch (code) {
    case '28P01':
    case '28000':
      return `the server refused the user or password (${message})`;
    case '3D000':
      return `no such database (${message})`;
    case '42501':
      return `the user may not create or change metis's tables there (${message}); grant it CREATE on the database, or migrate the store once as its owner`;
    case '42P07':
    case '42P01':
    case '42703':
      return `the database holds a metis schema that is half-migrated or not metis's (${message}); restore it or use an empty database`;
    case 'ECONNREFUSED':
      return `nothing accepts connections there (${message})`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `no such host (${message})`;
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
      return `the host does not answer (${message})`;
    default:
      return /timeout/i.test(message) ? `the host does not answer (${message})` : message;
  }
}

/**
 * A store that cannot be used at start-up as an error naming the setting to fix (exit 2), never a stack
 * trace: a bad URL, a wrong password, an unreachable host, missing permissions, a half-migrated schema.
 * A schema newer than this metis keeps its own code and message, with the setting in front.
 */
export function startupStoreError(error: unknown, setting: string, label: string): MetisError {
  if (error instanceof MetisError) {
    const code = error.code === 'METIS_ERR_SCHEMA_VERSION' ? 'METIS_ERR_STORE_UNUSABLE' : error.code;
    return new MetisError(code, `${setting}: ${error.message}`, {
      cause: error,
      hint:
        error.code === 'METIS_ERR_SCHEMA_VERSION'
          ? 'Run the metis version that wrote this store, or point the setting at another database.'
          : undefined,
    });
  }
  if (error instanceof TypeError && /URL/i.test(error.message))
    return new MetisError('METIS_ERR_STORE_UNUSABLE', `${setting}: ${label} is not a valid URL`, {
      cause: error,
    });
  return new MetisError('METIS_ERR_STORE_UNUSABLE', `${setting}: cannot use ${label}: ${reasonOf(error)}`, {
    cause: error,
  });
}
