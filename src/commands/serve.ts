import { plural } from '../client/plural.js';
import { CONFORMANCE_WARNING } from '../core/app/conformance-mode.js';
import { runsOnPostgresAlone, startDirectService } from '../core/app/start-direct.js';
import { type RunningService, startService } from '../core/app/start-service.js';
import { loadConfig } from '../core/config/load-config.js';
import { MetisError } from '../core/errors.js';
import { bearerTokenFromEnv, type ServerAuth } from '../core/http/local-token.js';
import { createServiceLogger, logFormatFor } from '../core/logger.js';
import { resolveDbPath } from '../core/store/paths.js';
import { asStorageError } from '../core/store/storage-errors.js';
import type { StoreContext } from '../core/store/store-context.js';
import type { FaultName } from '../core/stream/faults.js';
import { pickCluster } from './cluster-option.js';
import { pickStore } from './store-option.js';

export interface ServeOptions {
  host?: string;
  port?: string;
  db?: string;
  store?: string;
  nats?: string;
  nodeId?: string;
  advertiseUrl?: string;
  model?: string;
  config?: string;
  json?: boolean;
  conformance?: boolean;
  fault?: string[];
}

/** What `server.auth: none` costs, said in the banner. */
export const AUTH_NONE_WARNING =
  'server.auth: none: no token, so every account on this machine can drive this server (and run its tools as you)';

/** Where the token comes from, for the banner: the file path or the setting, never the token itself. */
function describeAuth(auth: ServerAuth): string {
  if (auth.mode === 'none') return 'none';
  if (auth.source === 'file') return `token in ${auth.tokenFile} (clients of this account read it)`;
  return auth.source === 'config' ? 'token from server.bearer_token' : 'token from $METIS_TOKEN';
}

/** After the shutdown bound: the process exits even if a stuck step did not let `stop()` settle. */
const FORCE_EXIT_MARGIN_MS = 2000;
/** After serve is done: exit even if a plugin's leftover timer or socket keeps the event loop alive. */
const LINGER_MS = 1000;

/**
 * Lets Node exit by itself when nothing is left to run, and exits anyway `LINGER_MS` later when
 * something is (a plugin's timer or socket whose wait metis gave up). The timer is unref'd so a clean
 * process does not wait for it.
 */
function exitWhenDone(): void {
  setTimeout(() => process.exit(), LINGER_MS).unref();
}

export async function serveCommand(options: ServeOptions): Promise<void> {
  try {
    await serve(options);
  } catch (error) {
    // A failed start (a plugin start() or config import that timed out) may leave its promise holding
    // the loop: print the error (the caller does) and exit.
    exitWhenDone();
    throw error;
  }
  exitWhenDone();
}

async function serve(options: ServeOptions): Promise<void> {
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
  const store = pickStore(options, config.store.url);
  config.store.url = store?.url ?? null;
  const clusterSettings = pickCluster(options, config);
  bearerTokenFromEnv(); // a weak token in the environment is refused before anything starts
  const dbPath = resolveDbPath(options.db ?? config.storage.database);
  const logger = createServiceLogger(process.env.METIS_LOG_LEVEL ?? 'info', logFormatFor(process.stderr));
  const faults = options.fault ?? [];
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
  const serviceOptions = {
    conformance: options.conformance ? { faults: faults as FaultName[] } : undefined,
    configPath: filepath,
    storeSetting: store?.setting,
    clusterSettings,
  };
  const starting: Promise<RunningService<StoreContext>> = runsOnPostgresAlone(config)
    ? startDirectService(config, dbPath, logger, serviceOptions)
    : startService(config, dbPath, logger, serviceOptions);
  const service = await starting.catch((error: unknown) => {
    // A full disk or a held lock at start-up (the lock file, the database) names the database path.
    throw asStorageError(error, dbPath);
  });
  const boundMs = config.server.shutdown_timeout_ms;
  // Listen before saying we are ready: a supervisor (or a test) may signal as soon as it reads the
  // ready line, and a signal before the listeners exist kills the process without releasing the lock.
  const stopped = new Promise<void>((resolve) => {
    let stopping = false;
    const forceExit = (why: string, code: number) => {
      console.error(`${why}: exiting now (database closed, lock released)`);
      service.abandon();
      process.exit(code);
    };
    const stop = (signal: NodeJS.Signals) => {
      const code = signal === 'SIGINT' ? 130 : 143;
      // A second signal does not wait for the first stop: close, unlock, exit.
      if (stopping) return forceExit(`${signal} again`, code);
      stopping = true;
      if (!options.json) {
        console.error(
          `\n${signal}: stopping (${config.runtime.on_restart === 'resume' && signal === 'SIGTERM' ? 'letting turns finish, the rest resume at the next start' : 'cancelling turns'}, stopping plugins, flushing the trace; at most ` +
            `${boundMs / 1000} s, ${signal === 'SIGINT' ? 'Ctrl-C' : 'a second signal'} again to force)…`,
        );
      }
      // stop() is bounded itself; this is the net under it, should a step not even yield.
      const net = setTimeout(
        () => forceExit(`still stopping after ${boundMs} ms`, 1),
        boundMs + FORCE_EXIT_MARGIN_MS,
      );
      const done = () => {
        clearTimeout(net);
        process.off('unhandledRejection', onUnhandledRejection);
        process.off('SIGINT', onInt);
        process.off('SIGTERM', onTerm);
        resolve();
      };
      // SIGTERM (a deploy, a supervisor) keeps running turns for the next start; Ctrl-C stops them now.
      service.stop({ handOver: signal === 'SIGTERM' }).then(done, (error: unknown) => {
        console.error(`error while stopping: ${(error as Error).message}`);
        done();
      });
    };
    const onInt = () => stop('SIGINT');
    const onTerm = () => stop('SIGTERM');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
  });
  const pluginNames = service.plugins.list().map((p) => p.name);
  if (options.json) {
    console.log(
      JSON.stringify({
        url: service.url,
        dashboard_url: service.dashboardUrl,
        db: service.dbPath,
        store: service.store,
        node_id: service.cluster?.nodeId ?? null,
        peers: service.cluster?.peers().map((peer) => ({ node_id: peer.node_id, url: peer.url })) ?? [],
        config: filepath,
        gaps: service.gaps.length,
        recovered_turns: service.recovery.turns,
        resumed_turns: service.recovery.resumable.length,
        plugins: pluginNames,
        auth: service.auth.mode,
        token_source: service.auth.mode === 'none' ? null : service.auth.source,
        token_file: service.auth.tokenFile,
        ...(service.auth.mode === 'none' ? { auth_warning: AUTH_NONE_WARNING } : {}),
        ...(options.conformance ? { warning: `--conformance: ${CONFORMANCE_WARNING}` } : {}),
      }),
    );
  } else {
    console.log(`metis serving on ${service.url}`);
    if (service.store === null) console.log(`  database  ${dbPath}`);
    else
      console.log(
        `  store     ${service.store} (${service.dbPath === '' ? 'no working copy' : `working copy ${service.dbPath}`})`,
      );
    if (service.cluster !== null) {
      const peers = service.cluster.peers();
      console.log(`  node      ${service.cluster.nodeId}`);
      console.log(
        `  peers     ${peers.length === 0 ? '(none alive)' : peers.map((peer) => `${peer.node_id} ${peer.url}`).join(', ')}`,
      );
    }
    console.log(`  config    ${filepath ?? '(built-in defaults)'}`);
    console.log(`  model     ${config.runtime.default_model}`);
    console.log(`  auth      ${describeAuth(service.auth)}`);
    if (service.auth.mode === 'none') console.log(`  WARNING   ${AUTH_NONE_WARNING}`);
    console.log(
      service.dashboardUrl === null
        ? '  dashboard (none: server.dashboard is false, or the build is missing: npm run build)'
        : `  dashboard ${service.dashboardUrl}`,
    );
    if (pluginNames.length > 0) console.log(`  plugins   ${pluginNames.join(', ')}`);
    if (service.gaps.length > 0)
      console.log(`  gaps      ${service.gaps.length} reported as bus.gap_detected`);
    if (service.recovery.turns > 0)
      console.log(
        `  recovered ${plural(service.recovery.turns, 'turn')} the last run left open, ended as failed`,
      );
    if (service.recovery.resumable.length > 0)
      console.log(
        `  resumed   ${plural(service.recovery.resumable.length, 'turn')} the last run left running`,
      );
    if (options.conformance) console.log(`  WARNING   --conformance: ${CONFORMANCE_WARNING}`);
    console.log('Press Ctrl-C to stop.');
  }
  await stopped;
}
