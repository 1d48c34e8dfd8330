import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { type RunningService, startService } from '../../src/core/app/start-service.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { silentLogger } from '../../src/core/logger.js';
import { tempDir } from './tmp.js';

/**
 * An embedded `metis serve --store <url>` with its data folder (and so its working copy) in `dir`, on a
 * free port; stopped when the test finishes (stopping twice is safe). Rejects as the start does.
 */
export async function serveOnStore(url: string, dir = tempDir()): Promise<RunningService> {
  const config = MetisConfigSchema.parse({ server: { port: 0 }, store: { url } });
  const service = await startService(config, join(dir, 'metis.db'), silentLogger(), {
    tokenFile: join(dir, 'token'),
  });
  onTestFinished(() => service.stop());
  return service;
}
