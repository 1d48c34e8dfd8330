import { join } from 'node:path';
import { onTestFinished } from 'vitest';
import { startService } from '../../src/core/app/start-service.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { silentLogger } from '../../src/core/logger.js';
import type { FaultName } from '../../src/core/stream/faults.js';
import { tempDir } from './tmp.js';

/** An embedded `metis serve --conformance`: its URL and its local token (in its own folder). */
export async function embeddedConformanceServer(faults: FaultName[] = []) {
  const config = MetisConfigSchema.parse({ server: { port: 0 } });
  const dir = tempDir();
  const service = await startService(config, join(dir, 'conformance.db'), silentLogger(), {
    conformance: { faults },
    tokenFile: join(dir, 'token'),
  });
  onTestFinished(() => service.stop());
  return { url: service.url, token: service.auth.token ?? undefined };
}
