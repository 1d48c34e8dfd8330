import type { Logger } from 'pino';
import type { Db } from '../database.js';
import { redactUrl } from '../store-copy.js';
import type { StoreUpstream } from '../store-upstream.js';
import { postgresPool } from './connect.js';
import { fillNodeCopy } from './node-copy.js';
import { PgShipper } from './pg-shipper.js';
import { ServeLock } from './serve-lock.js';
import { startupStoreError } from './startup-errors.js';
import { followSweeps } from './sweep-follower.js';
import { prepareWorkingCopy, type WorkingCopy, workingCopyPath } from './working-copy.js';

export interface PostgresServeStore {
  readonly copy: WorkingCopy;
  /** Makes the trace context's database the working copy, shipping to the store. */
  readonly upstream: (db: Db) => StoreUpstream;
  /**
   * Follows the retention sweeps run on the store while this server runs (sweep-follower.ts); the
   * returned function stops it. Call it once the working copy is open as the trace store.
   */
  followSweeps(): () => Promise<void>;
  /** Ends the pool and the serve lock. Safe to call twice. */
  close(): Promise<void>;
}

/** How long a shipment may wait for a connection, and a statement run, before it counts as failed. */

/** Where the working copy of the store at `url` lives; a URL that does not parse is named, exit 2. */
export function workingCopyFile(url: string, setting: string, dataDir: string): string {
  try {
    return workingCopyPath(dataDir, url);
  } catch (error) {
    throw startupStoreError(error, setting, redactUrl(url));
  }
}

/** What `metis serve --store postgres://…` runs on: the working copy, and the shipper's pool. */
export async function openPostgresStore(
  url: string,
  setting: string,
  dataDir: string,
  logger: Logger,
  /**
   * A node of a cluster, by its name: the store numbers the `system` session's events, and the
   * sessions another node runs are fenced off its shipments (pg-shipment.ts).
   */
  clusterNode: string | null = null,
): Promise<PostgresServeStore> {
  const cluster = clusterNode !== null;
  const copy = await prepareWorkingCopy({
    url,
    setting,
    dataDir,
    logger,
    cluster,
    // A node starts with its own sessions only: its start does not grow with the store.
    ...(clusterNode === null ? {} : { fill: (db, client) => fillNodeCopy(db, client, clusterNode) }),
  });
  const pool = postgresPool(url, 'serve', 2);
  const lock = new ServeLock(copy.lockHolder, url, copy.label, logger, cluster);
  let closing: Promise<void> | null = null;
  return {
    copy,
    upstream: (db) =>
      new PgShipper(db, pool, copy, logger, {
        numberSystemEvents: cluster,
        ...(clusterNode === null ? {} : { fenceFor: clusterNode }),
      }),
    followSweeps: () =>
      followSweeps({ pool, path: copy.path, claimant: clusterNode ?? `copy ${copy.copyId}`, logger }),
    close: () => {
      closing ??= Promise.all([pool.end().catch(() => {}), lock.close()]).then(() => {});
      return closing;
    },
  };
}
