import { connect, headers, type Msg, type NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { MetisError } from '../errors.js';

/** What `/healthz` and `metis cluster status` say of the broker. */
export type BrokerState = 'connected' | 'reconnecting' | 'closed';

/** What every view of the broker shares: its state, its outages, and closing it. */
export interface BrokerLifecycle {
  readonly state: BrokerState;
  /** Calls `listener` each time the broker is back after an outage (what was published meanwhile is lost). */
  onReconnect(listener: () => void): () => void;
  /** Calls `listener` each time the connection to the broker is lost. */
  onDisconnect(listener: () => void): () => void;
  /**
   * Resolves once the broker has taken every subscription and message sent before: a subscription
   * made before it gets every message published after it.
   */
  flush(): Promise<void>;
  /** Sends what is buffered and closes. Safe to call twice. */
  close(): Promise<void>;
}

/**
 * The broker as metis's cluster code uses it: text in, text out. The one in use seals every message
 * with the cluster's key (sealed-broker.ts), so what comes out of it was sent by a node of the cluster.
 */
export interface Broker extends BrokerLifecycle {
  /** Publishes one message; lost while the broker is away (core NATS keeps nothing). */
  publish(subject: string, data: string, meta?: Record<string, string>): void;
  /**
   * Calls `handler` with each message on `subject` (wildcards allowed), in the order the broker delivers
   * them, but this node's own; returns the function that stops it.
   */
  subscribe(subject: string, handler: (message: BrokerMessage) => void): () => void;
  /**
   * Sends `data` to whoever answers `subject` and resolves with the answer.
   * @throws Error when no one answers (no responder, or none within `timeoutMs`), or the answer is not
   *   one a node of the cluster sent
   */
  request(subject: string, data: string, timeoutMs: number): Promise<string>;
  /**
   * Answers each request on `subject` with what `answer` resolves to; returns the function that stops it.
   * A request that is not a node's of the cluster is answered with what `refuse` returns (as it is,
   * unsealed, since its sender could not read a sealed one), or not at all without `refuse`.
   */
  respond(
    subject: string,
    answer: (data: string) => Promise<string>,
    refuse?: (reason: string) => string,
  ): () => void;
}

/**
 * A request no one was subscribed to receive (the broker says so at once): it was delivered to nobody,
 * so sending it again cannot run it twice.
 */
export class NoResponderError extends Error {
  constructor(readonly subject: string) {
    super(`no one answers on ${subject}`);
  }
}

/** A message as a subscriber gets it. */
export interface BrokerMessage {
  readonly subject: string;
  readonly data: string;
  header(name: string): string | undefined;
}

/** A message as the NATS connection delivers it: bytes, and the headers, by the name they were set under. */
export interface RawBrokerMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: Readonly<Record<string, string>>;
}

/** The NATS connection itself: bytes in, bytes out, whoever sent them. */
export interface BrokerConnection extends BrokerLifecycle {
  publish(subject: string, data: Uint8Array, headers?: Readonly<Record<string, string>>): void;
  subscribe(subject: string, handler: (message: RawBrokerMessage) => void): () => void;
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
  /** Answers each request with what `answer` resolves to; null sends no answer. */
  respond(subject: string, answer: (data: Uint8Array) => Promise<Uint8Array | null>): () => void;
}

/** The headers of a message, each by the name it was set under (its first value). */
function headersOf(message: Msg): Readonly<Record<string, string>> {
  const found: Record<string, string> = {};
  if (message.headers === undefined) return found;
  for (const name of message.headers.keys()) found[name] = message.headers.get(name);
  return found;
}

/** How long the first connection may take before the start fails. */
const CONNECT_TIMEOUT_MS = 5_000;
/** A broker that stops answering (frozen, cut off) is known after two missed pings. */
const PING_INTERVAL_MS = 5_000;
/** How long closing waits for what is buffered to reach the broker before it just closes. */
const DRAIN_TIMEOUT_MS = 2_000;

/** The URLs with any credentials hidden (a user's password, or a token given as the user), for messages. */
export function redactNatsUrl(url: string): string {
  return url.replace(/\/\/([^@/,]+)@/g, (_, userinfo: string) =>
    userinfo.includes(':') ? `//${userinfo.slice(0, userinfo.indexOf(':'))}:***@` : '//***@',
  );
}

/**
 * The client's options from `nats://user:pass@host:port` (or `nats://token@host`, or `tls://…`): the
 * client does not read credentials from a server URL, so they are taken out and passed on their own;
 * `tls://` asks for TLS.
 */
export function natsOptionsFrom(url: string): {
  servers: string[];
  user?: string;
  pass?: string;
  token?: string;
  tls?: Record<string, never>;
} {
  const servers: string[] = [];
  let credentials: { user?: string; pass?: string; token?: string } = {};
  let tls = false;
  for (const one of url.split(',')) {
    const parsed = new URL(one);
    tls ||= parsed.protocol === 'tls:';
    if (parsed.username !== '' && Object.keys(credentials).length === 0)
      credentials =
        parsed.password === ''
          ? { token: decodeURIComponent(parsed.username) }
          : { user: decodeURIComponent(parsed.username), pass: decodeURIComponent(parsed.password) };
    servers.push(
      `${parsed.hostname.includes(':') ? `[${parsed.hostname}]` : parsed.hostname}:${parsed.port || '4222'}`,
    );
  }
  return { servers, ...credentials, ...(tls ? { tls: {} } : {}) };
}

/**
 * Connects to the cluster's NATS broker. At start-up an unreachable broker is a bad setting (exit 2,
 * naming it); once connected, a lost broker is waited out for ever: the client reconnects by itself,
 * and this node's own sessions keep working meanwhile (what was published in between is lost, which is
 * why readers fill gaps from the store). Anyone the broker lets in may publish and read here: a node
 * uses this connection only through sealBroker (sealed-broker.ts).
 * @throws MetisError METIS_ERR_BROKER_UNREACHABLE naming `setting`
 */
export async function connectBroker(options: {
  readonly url: string;
  readonly nodeId: string;
  readonly setting: string;
  readonly logger: Logger;
}): Promise<BrokerConnection> {
  const { url, nodeId, setting, logger } = options;
  const label = redactNatsUrl(url);
  let connection: NatsConnection;
  try {
    connection = await connect({
      ...natsOptionsFrom(url),
      name: `metis ${nodeId}`,
      timeout: CONNECT_TIMEOUT_MS,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      pingInterval: PING_INTERVAL_MS,
      maxPingOut: 2,
    });
  } catch (error) {
    throw new MetisError(
      'METIS_ERR_BROKER_UNREACHABLE',
      `${setting}: cannot reach the NATS broker at ${label}: ${(error as Error).message}`,
    );
  }
  let state: BrokerState = 'connected';
  const reconnectListeners = new Set<() => void>();
  const disconnectListeners = new Set<() => void>();
  void (async () => {
    for await (const status of connection.status()) {
      if (status.type === 'disconnect' || status.type === 'reconnecting') {
        const lost = state === 'connected';
        if (lost)
          logger.warn({ broker: label }, 'lost the NATS broker; this node keeps serving its own sessions');
        state = 'reconnecting';
        if (lost) for (const listener of disconnectListeners) listener();
      } else if (status.type === 'reconnect') {
        state = 'connected';
        logger.info({ broker: label }, 'the NATS broker is back');
        for (const listener of reconnectListeners) listener();
      }
    }
  })();
  void connection.closed().then((error) => {
    state = 'closed';
    if (error !== undefined)
      logger.error({ broker: label, err: (error as Error).message }, 'the NATS connection closed');
  });
  let closing: Promise<void> | null = null;
  return {
    get state() {
      return state;
    },
    publish(subject, data, meta) {
      if (state === 'closed') return;
      let h: ReturnType<typeof headers> | undefined;
      if (meta !== undefined) {
        h = headers();
        for (const [key, value] of Object.entries(meta)) h.set(key, value);
      }
      try {
        connection.publish(subject, data, h === undefined ? undefined : { headers: h });
      } catch (error) {
        // Publishing on a closing connection throws; a fan-out message is not worth a turn.
        logger.debug({ err: (error as Error).message, subject }, 'NATS publish failed');
      }
    },
    subscribe(subject, handler) {
      const subscription = connection.subscribe(subject, {
        callback: (error, message) => {
          if (error !== null) return;
          handler({ subject: message.subject, data: message.data, headers: headersOf(message) });
        },
      });
      return () => subscription.unsubscribe();
    },
    async request(subject, data, timeoutMs) {
      try {
        return (await connection.request(subject, data, { timeout: timeoutMs })).data;
      } catch (error) {
        if ((error as { isNoResponders?: () => boolean }).isNoResponders?.() === true)
          throw new NoResponderError(subject);
        throw error;
      }
    },
    respond(subject, answer) {
      const subscription = connection.subscribe(subject, {
        callback: (error, message) => {
          if (error !== null) return;
          void answer(message.data).then(
            (reply) => {
              if (reply !== null) message.respond(reply);
            },
            (failure: unknown) =>
              logger.error({ err: (failure as Error).message, subject }, 'answering a request failed'),
          );
        },
      });
      return () => subscription.unsubscribe();
    },
    flush: () => connection.flush(),
    onReconnect(listener) {
      reconnectListeners.add(listener);
      return () => reconnectListeners.delete(listener);
    },
    onDisconnect(listener) {
      disconnectListeners.add(listener);
      return () => disconnectListeners.delete(listener);
    },
    close() {
      // A broker away or frozen would hold a drain until its pings time out: close outright then.
      closing ??=
        state !== 'connected'
          ? connection.close().catch(() => {})
          : Promise.race([
              connection.drain(),
              new Promise((resolve) => setTimeout(resolve, DRAIN_TIMEOUT_MS).unref()),
            ])
              .catch(() => {})
              .then(() => connection.close())
              .catch(() => {});
      return closing;
    },
  };
}
