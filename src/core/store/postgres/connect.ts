import pg from 'pg';
import { BIGINT_AS_NUMBER } from './pg-util.js';

/**
 * What a connection is for. Each role has its own limits (a prune's batch may run minutes, a cluster
 * heartbeat must give up in seconds) and names itself in `pg_stat_activity.application_name`, so an
 * operator can tell metis's connections apart.
 */
export type PostgresRole =
  | 'serve'
  | 'serve-lock'
  | 'event-log'
  | 'cluster'
  | 'prune'
  | 'copy'
  | 'inspect'
  | 'doctor';

interface RoleLimits {
  readonly connectMs: number;
  /** Server-side limit per statement; none where a statement may legitimately run long. */
  readonly statementMs?: number;
  /** Client-side limit: a network that drops packets silently answers nothing. */
  readonly queryMs?: number;
  /** TCP keepalive notices a dead peer on an idle connection kept for the life of the process. */
  readonly keepAlive: boolean;
}

const LIMITS: Record<PostgresRole, RoleLimits> = {
  serve: { connectMs: 5_000, statementMs: 30_000, queryMs: 35_000, keepAlive: true },
  'serve-lock': { connectMs: 10_000, keepAlive: true },
  'event-log': { connectMs: 10_000, statementMs: 30_000, keepAlive: true },
  cluster: { connectMs: 5_000, queryMs: 10_000, keepAlive: true },
  // One batch, or the plan over the whole table, is one statement: bounded, and bounded again here.
  prune: { connectMs: 10_000, statementMs: 300_000, queryMs: 310_000, keepAlive: false },
  copy: { connectMs: 10_000, statementMs: 300_000, keepAlive: false },
  inspect: { connectMs: 10_000, keepAlive: false },
  doctor: { connectMs: 5_000, queryMs: 10_000, keepAlive: false },
};

function settings(url: string, role: PostgresRole): pg.ClientConfig {
  const limits = LIMITS[role];
  return {
    connectionString: url,
    types: BIGINT_AS_NUMBER,
    application_name: `metis ${role}`,
    connectionTimeoutMillis: limits.connectMs,
    keepAlive: limits.keepAlive,
    ...(limits.statementMs === undefined ? {} : { statement_timeout: limits.statementMs }),
    ...(limits.queryMs === undefined ? {} : { query_timeout: limits.queryMs }),
  };
}

/**
 * The one way metis opens a PostgreSQL connection. The client is not connected yet. A connection the
 * server drops (a restart) emits 'error' outside any query: without a listener that ends the process;
 * the query in flight, if any, still fails with the error.
 */
export function postgresClient(url: string, role: PostgresRole): pg.Client {
  const client = new pg.Client(settings(url, role));
  client.on('error', () => {});
  return client;
}

/**
 * As postgresClient, a pool of up to `max` connections; a dropped idle connection is replaced. Each
 * connection the pool makes gets a listener of its own for its whole life: pg-pool listens to a
 * connection only while it is idle or inside `pool.query`, and a restart's FATAL reaching one at any
 * other moment (checked out between two statements, being handed on) would end the process. Queries
 * in flight still fail with the error, and the pool still discards the broken connection.
 */
export function postgresPool(url: string, role: PostgresRole, max: number): pg.Pool {
  const pool = new pg.Pool({ ...settings(url, role), max });
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}
