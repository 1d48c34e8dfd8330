import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { createLogger } from '../core/logger.js';
import { FAULT_NAMES, type FaultName } from '../core/server/faults.js';
import { startService } from '../core/server/serve.js';
import { resolveDbPath } from '../core/store/paths.js';
import { asStorageError } from '../core/store/storage-errors.js';

export interface ServeOptions {
  host?: string;
  port?: string;
  db?: string;
  model?: string;
  config?: string;
  json?: boolean;
  conformance?: boolean;
  fault?: string[];
}

export async function serveCommand(options: ServeOptions): Promise<void> {
  const { config, filepath } = await loadConfig({ explicitPath: options.config ?? null });
  if (options.host) config.server.host = options.host;
  if (options.port !== undefined) {
    const port = Number(options.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `--port: "${options.port}" is not a port number (0-65535)`,
      );
    }
    config.server.port = port;
  }
  if (options.model) {
    if (!/^[a-z0-9-]+:\S+$/.test(options.model)) {
      throw new MetisError(
        'METIS_ERR_INVALID_MODEL',
        `--model: "${options.model}" is not of the form provider:name`,
      );
    }
    config.runtime.default_model = options.model;
  }
  const dbPath = resolveDbPath(options.db ?? config.storage.database);
  const logger = createLogger({ level: process.env.METIS_LOG_LEVEL ?? 'info' });
  const faults = options.fault ?? [];
  for (const fault of faults) {
    if (!(fault in FAULT_NAMES)) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `--fault: "${fault}" is not one of ${Object.keys(FAULT_NAMES).join(', ')}`,
      );
    }
  }
  if (faults.length > 0 && !options.conformance) {
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', '--fault: only with --conformance');
  }
  // The safety net under every turn and handler: a promise that rejects with no handler is a bug, but
  // on a server it must cost one request or one turn, not the process (Node's default is to exit 1).
  const onUnhandledRejection = (reason: unknown) => {
    logger.error(
      { err: reason, diagnostic: 'unhandled_rejection' },
      'a promise rejected and nothing handled it; the server carries on (please report this as a bug)',
    );
  };
  process.on('unhandledRejection', onUnhandledRejection);
  const service = await startService(config, dbPath, logger, {
    conformance: options.conformance ? { faults: faults as FaultName[] } : undefined,
    configPath: filepath,
  }).catch((error: unknown) => {
    // A full disk or a held lock at start-up (the lock file, the database) names the database path.
    throw asStorageError(error, dbPath);
  });
  const pluginNames = service.plugins.list().map((p) => p.name);
  if (options.json) {
    console.log(
      JSON.stringify({
        url: service.url,
        db: dbPath,
        config: filepath,
        gaps: service.gaps.length,
        recovered_turns: service.recovery.turns,
        plugins: pluginNames,
      }),
    );
  } else {
    console.log(`metis serving on ${service.url}`);
    console.log(`  database  ${dbPath}`);
    console.log(`  config    ${filepath ?? '(built-in defaults)'}`);
    console.log(`  model     ${config.runtime.default_model}`);
    if (pluginNames.length > 0) console.log(`  plugins   ${pluginNames.join(', ')}`);
    if (service.gaps.length > 0)
      console.log(`  gaps      ${service.gaps.length} reported as bus.gap_detected`);
    if (service.recovery.turns > 0)
      console.log(`  recovered ${service.recovery.turns} turns the last run left open, ended as failed`);
    console.log('Press Ctrl-C to stop.');
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
      if (!options.json) console.error(`\n${signal}: stopping (cancelling turns, flushing the trace)…`);
      service.stop().then(
        () => {
          process.off('unhandledRejection', onUnhandledRejection);
          resolve();
        },
        (error: unknown) => {
          console.error(`error while stopping: ${(error as Error).message}`);
          resolve();
        },
      );
    };
    const onInt = () => stop('SIGINT');
    const onTerm = () => stop('SIGTERM');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
  });
}
