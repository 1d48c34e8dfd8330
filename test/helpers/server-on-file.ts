import { onTestFinished } from 'vitest';
import { type ServerOptions, startServer } from '../../src/core/app/metis-server.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { testRuntimeConfig } from './runtime-config.js';
import { tempTraceContext } from './tmp.js';

/**
 * A real server on port 0 over the given database file: stop it and call this again on the same file
 * for a restart. Stopped at the end of the test if still running.
 */
export async function serverOnFile(
  dbPath: string,
  options: { readonly config?: RuntimeConfigInput; readonly server?: ServerOptions } = {},
) {
  const context = tempTraceContext({ dbPath });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: testRuntimeConfig(options.config ?? {}),
  });
  const server = await startServer(runtime, context, { port: 0, ...options.server });
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await server.close();
    await runtime.close();
    await context.close();
  };
  onTestFinished(stop);
  return { context, runtime, server, url: server.url, stop };
}
