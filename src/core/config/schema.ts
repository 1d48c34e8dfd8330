import { isIP } from 'node:net';
import { z } from 'zod';
import { GatewayConfigSchema } from './gateway-schema.js';
import { RuntimeConfigSchema } from './runtime-schema.js';

function isAddressOrRange(entry: string): boolean {
  const [address = '', bits, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 6 ? 128 : 32);
}

export const ServerConfigSchema = z.strictObject({
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(8421),
  /**
   * `token` (default): every request but `GET /healthz` needs the token (`bearer_token`, $METIS_TOKEN,
   * else `$METIS_HOME/token`). `none`: no token, allowed on a loopback bind only.
   */
  auth: z.enum(['token', 'none']).default('token'),
  /** Required to bind a non-loopback address. */
  bearer_token: z.string().min(16, 'must be at least 16 characters').nullable().default(null),
  allowed_origins: z.array(z.string().url()).default([]),
  /**
   * Reverse proxies (addresses or CIDR ranges) whose `X-Forwarded-For` names the client: the slow-down
   * of wrong tokens then counts each client apart instead of the proxy as one.
   */
  trusted_proxies: z
    .array(z.string().refine(isAddressOrRange, 'must be an IP address or a CIDR range like 10.0.0.0/8'))
    .default([]),
  max_queue_events: z.number().int().positive().default(1000),
  max_queue_bytes: z
    .number()
    .int()
    .positive()
    .default(8 * 1024 * 1024),
  replay_cap: z.number().int().positive().default(10_000),
  heartbeat_interval_ms: z.number().int().positive().default(30_000),
  attach_token_ttl_ms: z.number().int().positive().default(60_000),
  /**
   * The dashboard at `/`: `true` serves the one built with metis (dist/dashboard), a path serves that
   * folder (a build of your own), `false` serves none.
   */
  dashboard: z.union([z.boolean(), z.string().min(1)]).default(true),
  /** Bound on a graceful stop (SIGTERM, Ctrl-C): what is still running then is abandoned. */
  shutdown_timeout_ms: z.number().int().positive().default(10_000),
  /**
   * What the trace view's content shows (`GET /sessions/{id}/trace`): `full` every text, input and output;
   * `redacted` replaces each field more private than pseudonymous (user text, model output, tool input
   * and output) with `{redacted: true, chars}` (docs/dashboard.md).
   */
  dashboard_content: z.enum(['full', 'redacted']).default('full'),
});

export const StorageConfigSchema = z.strictObject({
  /** Database file; default `$METIS_HOME/metis.db`. */
  database: z.string().min(1).nullable().default(null),
  retention_days: z.number().int().positive().default(90),
  synchronous: z.enum(['NORMAL', 'FULL']).default('NORMAL'),
});

export const StoreConfigSchema = z.strictObject({
  /**
   * A PostgreSQL store, `postgres://user:pass@host:port/db`, instead of the SQLite file (docs/storage.md);
   * null for the file. `--store` and `$METIS_STORE_URL` override it.
   */
  url: z
    .string()
    .regex(/^postgres(ql)?:\/\//i, {
      error: 'must be a postgres:// URL (a SQLite file goes in storage.database)',
    })
    .nullable()
    .default(null),
  /**
   * `true` (the default): the server runs on a SQLite working copy of the store and ships to it.
   * `false`: it reads and writes PostgreSQL alone (docs/plans/store-port.md step 8; one server, no
   * cluster yet; plugins read the trace as docs/plugins.md "Reading the trace" says).
   */
  working_copy: z.boolean().default(true),
});

/** A node name: it appears in NATS subjects and in `metis cluster status`, so letters, digits, - and _. */
export const NODE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

/**
 * Several `metis serve` nodes on one PostgreSQL store (docs/scale-out.md): the NATS broker they share,
 * this node's name, and how long a node that stopped beating counts as alive.
 */
export const ClusterConfigSchema = z.strictObject({
  /** `nats://host:port` (several comma-separated); null: not part of a cluster. */
  nats: z
    .string()
    .regex(/^(nats|tls):\/\/[^\s,]+(,(nats|tls):\/\/[^\s,]+)*$/i, {
      error: 'must be a nats:// URL (several separated by commas)',
    })
    .nullable()
    .default(null),
  /** This node's name, unique in the cluster; default: the host name and a hash of the data folder. */
  node_id: z
    .string()
    .regex(NODE_ID_PATTERN, {
      error: 'must be 1-63 letters, digits, - or _, starting with a letter or digit',
    })
    .nullable()
    .default(null),
  /**
   * The URL other nodes and clients reach this node at (recorded in the store, named in refusals); default
   * the server's own URL, or the host name when it binds every address (0.0.0.0, ::).
   */
  advertise_url: z
    .string()
    .url()
    .regex(/^https?:\/\//, { error: 'must be an http:// or https:// URL' })
    .nullable()
    .default(null),
  /** How often a node records that it is alive. */
  heartbeat_ms: z.number().int().min(100).max(60_000).default(1_000),
  /** A node silent this long counts as gone: its name may be taken again. */
  node_timeout_ms: z.number().int().min(1_000).max(600_000).default(10_000),
});

export const BusConfigSchema = z.strictObject({
  validation: z.enum(['strict', 'lenient']).nullable().default(null),
  queue_limit: z.number().int().positive().default(10_000),
});

/** How long metis waits on a plugin's code before it names the plugin and stops waiting. */
export const PluginTimeoutsSchema = z.strictObject({
  /** Importing the module (its top-level code, awaits included); over it, start-up fails. */
  load_ms: z.number().int().positive().default(10_000),
  /** `create()` and `start()`, each; over it, start-up fails. */
  start_ms: z.number().int().positive().default(10_000),
  /** One `handle()` or `handleBatch()` call of a mailbox plugin; over it, the plugin is disabled. */
  handler_ms: z.number().int().positive().default(30_000),
  /** Delivering the queued events at shutdown, then each `stop()`. */
  stop_ms: z.number().int().positive().default(5_000),
});

/** Every setting of metis, with its default (docs/configuration.md). */
export const MetisConfigSchema = z.strictObject({
  server: ServerConfigSchema.default(ServerConfigSchema.parse({})),
  storage: StorageConfigSchema.default(StorageConfigSchema.parse({})),
  store: StoreConfigSchema.default(StoreConfigSchema.parse({})),
  cluster: ClusterConfigSchema.default(ClusterConfigSchema.parse({})),
  bus: BusConfigSchema.default(BusConfigSchema.parse({})),
  runtime: RuntimeConfigSchema.default(RuntimeConfigSchema.parse({})),
  /** Plugins (docs/plugins.md): a built-in name, a package name or a path, optionally with options. */
  plugins: z
    .array(
      z.union([z.string().min(1), z.tuple([z.string().min(1), z.record(z.string(), z.unknown())])], {
        error: 'must be a plugin name or path, or [name, { options }]',
      }),
    )
    .default([]),
  plugin_timeouts: PluginTimeoutsSchema.default(PluginTimeoutsSchema.parse({})),
  /** The OpenAI- and Anthropic-compatible gateway under `/v1` (docs/gateway.md). */
  gateway: GatewayConfigSchema.default(GatewayConfigSchema.parse({})),
});

export type MetisConfig = z.output<typeof MetisConfigSchema>;
export type MetisConfigInput = z.input<typeof MetisConfigSchema>;
