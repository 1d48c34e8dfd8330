import type { Logger } from 'pino';
import type { PluginHost } from '../../plugins/plugin-host.js';
import { pluginsRoute } from '../../plugins/plugins-route.js';
import { conformanceRoutes } from '../api/conformance-hooks.js';
import type { MetisConfig } from '../config/schema.js';
import { keystorePath } from '../gateway/keystore.js';
import type { ServerAuth } from '../http/local-token.js';
import type { Runtime } from '../runtime/runtime.js';
import { pgSharedSpend } from '../store/postgres/pg-gateway-spend.js';
import { pgStoreReads } from '../store/postgres/pg-store-reads.js';
import type { StoreContext } from '../store/store-context.js';
import type { StoreUpstream } from '../store/store-upstream.js';
import type { FaultName } from '../stream/faults.js';
import type { ClusterSeat } from './cluster-seat.js';
import { CONFORMANCE_HEARTBEAT_MS, faultSwitches } from './conformance-mode.js';
import { type MetisServer, startServer } from './metis-server.js';

export interface ServerParts {
  readonly config: MetisConfig;
  readonly runtime: Runtime;
  readonly trace: StoreContext;
  readonly plugins: PluginHost;
  readonly seat: ClusterSeat;
  readonly auth: ServerAuth;
  /** The dashboard's folder, or null when none is served. */
  readonly dashboard: string | null;
  readonly conformance?: { faults: readonly FaultName[] };
  readonly logger: Logger;
}

/** The server stage of the start: the HTTP API and the streams, as config says, in front of the runtime. */
export function startServiceServer(parts: ServerParts): Promise<MetisServer> {
  const { config, runtime, trace, seat, conformance } = parts;
  const heartbeatIntervalMs = conformance ? CONFORMANCE_HEARTBEAT_MS : config.server.heartbeat_interval_ms;
  // A cluster node's working copy holds only the sessions it ran or read: the list and the usage chart
  // are the store's.
  const wholeStore = seat.clustered && config.store.url !== null ? pgStoreReads(config.store.url) : null;
  if (wholeStore !== null) trace.onClose(() => wholeStore.close());
  return startServer(runtime, trace, {
    host: config.server.host,
    port: config.server.port,
    bearerToken: parts.auth.token,
    allowedOrigins: config.server.allowed_origins,
    trustedProxies: config.server.trusted_proxies,
    staticRoot: parts.dashboard ?? undefined,
    attachTokenTtlMs: config.server.attach_token_ttl_ms,
    dashboardContent: config.server.dashboard_content,
    stream: {
      maxQueueEvents: config.server.max_queue_events,
      maxQueueBytes: config.server.max_queue_bytes,
      replayCap: config.server.replay_cap,
      heartbeatIntervalMs,
      retentionDays: config.storage.retention_days,
    },
    faults: faultSwitches(conformance?.faults ?? []),
    logger: parts.logger,
    metrics: { plugins: () => parts.plugins.list(), processMetrics: true },
    sessionRouter: seat.router(runtime),
    wholeStore: wholeStore ?? undefined,
    gateway: config.gateway.enabled
      ? {
          config: config.gateway,
          keystorePath: keystorePath(config.gateway.keystore),
          // On PostgreSQL every node's calls count against one cap (docs/gateway.md "Quotas").
          ...(config.store.url === null ? {} : { sharedSpend: pgSharedSpend(config.store.url) }),
        }
      : undefined,
    health: () => ({
      ...(trace.upstream === null ? {} : { store: storeHealth(trace.upstream) }),
      ...(seat.node === null ? {} : seat.node.health()),
    }),
    extraRoutes: ({ hub }) => [
      pluginsRoute(parts.plugins),
      ...(conformance
        ? conformanceRoutes(
            trace,
            {
              heartbeatIntervalMs,
              maxQueueEvents: config.server.max_queue_events,
              replayCap: config.server.replay_cap,
              faults: conformance.faults,
            },
            hub,
          )
        : []),
    ],
  });
}

/**
 * What `/healthz` says of a PostgreSQL store: whether it takes writes now. Not its URL nor the reason
 * (a host name, an address): `/healthz` needs no token; the log has the reason.
 */
function storeHealth(upstream: StoreUpstream): { state: 'ok' | 'unavailable' } {
  return { state: upstream.failure === null ? 'ok' : 'unavailable' };
}
