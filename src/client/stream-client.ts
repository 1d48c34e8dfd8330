import { backoffMs } from '../core/backoff.js';
import { CATALOG } from '../core/events/catalog/index.js';
import type { Frame, WireEvent } from './reducer.js';

export type FilterSpec =
  | 'preset:chat'
  | 'preset:full'
  | { event_types?: string[] | null; actors?: string[] | null; include_worker_sessions?: boolean };

export interface ClientOptions {
  /** Base URL of the server, e.g. `http://127.0.0.1:8421`. */
  readonly url: string;
  readonly sessionId: string;
  readonly filter?: FilterSpec;
  /** Ask for a snapshot on the first connect (later connects resume from the cursor). */
  readonly snapshot?: boolean;
  /** Resume after this event id on the first connect. */
  readonly since?: string | null;
  /** Bearer token for servers that require one. */
  readonly token?: string;
  /** Reconnect backoff bounds in ms (jittered). */
  readonly backoff?: { readonly minMs: number; readonly maxMs: number };
  /**
   * Give up at once when the very first connect finds no server (failure code `unreachable`), instead
   * of retrying for ever: a command run against the wrong URL should say so, not wait. Once connected,
   * drops and restarts are retried as always.
   */
  readonly failFast?: boolean;
  /**
   * Opens the WebSocket: Node's entry (`client.ts`) uses `ws`, which can send the bearer token as a
   * header; the browser entry uses the global `WebSocket` (the attach token in the URL suffices).
   */
  readonly openSocket: OpenSocket;
}

/** The part of the WHATWG WebSocket the client uses; `ws` and browsers both have it. */
export interface StandardSocket {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number): void;
  addEventListener(type: 'open' | 'close' | 'error', listener: () => void): void;
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
}

export type OpenSocket = (url: string, headers: Record<string, string> | undefined) => StandardSocket;

/** `readyState` of an open socket (WHATWG WebSocket.OPEN). */
const OPEN = 1;

/** Why a client stopped on its own: the HTTP status (null for a subscribe error), code and message. */
export interface ClientFailure {
  readonly status: number | null;
  readonly code: string | null;
  readonly message: string;
}

/** What the client yields: frames as they arrive plus notices about the connection. */
export type ClientItem =
  | { readonly kind: 'frame'; readonly frame: Frame }
  | {
      readonly kind: 'status';
      readonly status: 'connecting' | 'connected' | 'reconnecting';
      readonly detail: string;
    }
  | { readonly kind: 'resync'; readonly reason: string }
  | {
      readonly kind: 'gap';
      readonly session_id: string;
      readonly after_seq: number;
      readonly next_seq: number;
    };

/**
 * The metis streaming client. Attaches over HTTP (a fresh token for every connect), subscribes, and
 * yields frames as an async iterator. It reconnects with jittered backoff and the last received id
 * as cursor, resubscribes with a snapshot when the cursor expired or the gap is too large (and says
 * so), answers pings, drops duplicate ids, and reports `seq` holes per session.
 *
 * Runs in Node and in browsers: the socket comes from `options.openSocket` (entries `client.ts` and
 * `browser.ts` supply it), everything else is `fetch` and timers.
 *
 * @example
 * const client = new MetisClient({ url: 'http://127.0.0.1:8421', sessionId, filter: 'preset:chat', snapshot: true });
 * for await (const item of client) if (item.kind === 'frame') state = reduce(state, item.frame);
 */
export class MetisClient implements AsyncIterable<ClientItem> {
  private ws: StandardSocket | null = null;
  private lastEventId: string | null;
  private readonly lastSeq = new Map<string, number>();
  private readonly items: ClientItem[] = [];
  private wake: (() => void) | null = null;
  private closed = false;
  private attempts = 0;
  private wantSnapshot: boolean;
  private connecting: Promise<void> | null = null;
  private failed: ClientFailure | null = null;
  private everConnected = false;
  /** Whether the server's resolved filter lets every persisted event through (then `seq` has no holes). */
  private seqComplete = false;
  /**
   * Whether the subscription gets every event of the workers too. Without it a worker's confirmations
   * still arrive (docs/decisions.md "Delegated confirmations"), but alone: their `seq` has holes.
   */
  private withWorkers = false;

  constructor(private readonly options: ClientOptions) {
    this.lastEventId = options.since ?? null;
    this.wantSnapshot = options.snapshot ?? false;
  }

  /**
   * Why the client stopped on its own (the server refused the handshake: unknown session, missing or
   * wrong bearer token; or a subscribe error retrying cannot fix); null otherwise.
   */
  get failure(): ClientFailure | null {
    return this.failed;
  }

  /** The id of the newest event received: the cursor for the next reconnect. */
  get cursor(): string | null {
    return this.lastEventId;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ClientItem> {
    this.connecting ??= this.connect();
    for (;;) {
      while (this.items.length > 0) yield this.items.shift()!;
      if (this.closed) return;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  /** Submits a user message (HTTP `POST /sessions/{id}/turns`); resolves with the turn id. */
  async submitTurn(message: string, options: { model?: string } = {}): Promise<string> {
    const body = await this.http('POST', `/sessions/${this.options.sessionId}/turns`, {
      message,
      ...options,
    });
    return body.turn_id as string;
  }

  /** Cancels a turn with a `cancel` frame when connected, else over HTTP. */
  async cancel(turnId: string, reason = 'user_cancel'): Promise<void> {
    if (this.ws?.readyState === OPEN) {
      this.ws.send(JSON.stringify({ type: 'cancel', turn_id: turnId, reason }));
      return;
    }
    await this.http('POST', `/sessions/${this.options.sessionId}/turns/${turnId}/cancel`, { reason });
  }

  async confirm(
    requestId: string,
    decision: 'allow' | 'deny',
    scope: 'once' | 'session' = 'once',
  ): Promise<void> {
    await this.http('POST', `/sessions/${this.options.sessionId}/confirmations/${requestId}`, {
      decision,
      scope,
    });
  }

  /** Stops reconnecting and closes the socket; the iterator ends. */
  close(): void {
    this.closed = true;
    this.ws?.close(1000);
    this.push(null);
  }

  private push(item: ClientItem | null): void {
    if (item) this.items.push(item);
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private async http(method: string, path: string, body?: unknown): Promise<Record<string, any>> {
    const headers: Record<string, string> = {};
    // Anything but a read is JSON, even with no body: the server refuses a change a form could send.
    if (body !== undefined || method !== 'GET') headers['content-type'] = 'application/json';
    if (this.options.token) headers.authorization = `Bearer ${this.options.token}`;
    const response = await fetch(`${this.options.url}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const parsed = (await response.json().catch(() => ({}))) as Record<string, any>;
    if (!response.ok) {
      const error = new Error(parsed.error?.message ?? `HTTP ${response.status}`) as Error & {
        status: number;
        code?: string;
      };
      error.status = response.status;
      error.code = parsed.error?.code;
      throw error;
    }
    return parsed;
  }

  private async connect(): Promise<void> {
    while (!this.closed) {
      if (this.attempts === 0) this.push({ kind: 'status', status: 'connecting', detail: this.options.url });
      try {
        const handshake = await this.http('GET', `/sessions/${this.options.sessionId}`);
        const closedWith = await this.stream(handshake.ws_url as string);
        if (this.closed) return;
        if (closedWith === 'fatal') return this.close();
      } catch (error) {
        const status = (error as { status?: number }).status;
        if (status === 404 || status === 401 || status === 403) {
          this.failed = {
            status,
            code: (error as { code?: string }).code ?? null,
            message: (error as Error).message,
          };
          this.push({
            kind: 'status',
            status: 'reconnecting',
            detail: `giving up: ${(error as Error).message}`,
          });
          return this.close();
        }
        if (status === undefined && this.options.failFast && !this.everConnected) {
          const cause = (error as Error).cause as { code?: string; message?: string } | undefined;
          this.failed = {
            status: null,
            code: 'unreachable',
            message: `cannot reach a metis server at ${this.options.url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`,
          };
          return this.close();
        }
      }
      this.attempts += 1;
      const { minMs, maxMs } = this.options.backoff ?? { minMs: 200, maxMs: 5000 };
      const ceiling = backoffMs({ baseMs: minMs, maxMs }, this.attempts);
      const delayMs = minMs + Math.random() * (ceiling - minMs);
      this.push({
        kind: 'status',
        status: 'reconnecting',
        detail: `${this.options.url} (attempt ${this.attempts}, next in ${(delayMs / 1000).toFixed(1)} s)`,
      });
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
  }

  /** One connection; resolves when it closes: 'retry' to reconnect, 'fatal' to stop. */
  private stream(wsUrl: string): Promise<'retry' | 'fatal'> {
    return new Promise((resolve) => {
      const headers = this.options.token ? { authorization: `Bearer ${this.options.token}` } : undefined;
      const ws = this.options.openSocket(wsUrl, headers);
      this.ws = ws;
      let outcome: 'retry' | 'fatal' = 'retry';
      const subscribe = (snapshot: boolean) =>
        ws.send(
          JSON.stringify({
            type: 'subscribe',
            filter: this.options.filter ?? 'preset:chat',
            since: snapshot ? null : this.lastEventId,
            snapshot,
          }),
        );
      ws.addEventListener('open', () => subscribe(this.wantSnapshot));
      ws.addEventListener('message', ({ data }) => {
        let frame: Frame;
        try {
          frame = JSON.parse(String(data)) as Frame;
        } catch {
          return;
        }
        switch (frame.type) {
          case 'ping':
            ws.send(JSON.stringify({ type: 'pong', nonce: frame.nonce }));
            return;
          case 'subscribe_ack':
            this.attempts = 0;
            this.everConnected = true;
            this.wantSnapshot = false;
            this.seqComplete = receivesEverySeq(frame.resolved_filter);
            this.withWorkers = frame.resolved_filter?.include_worker_sessions === true;
            this.push({ kind: 'status', status: 'connected', detail: this.options.url });
            break;
          case 'subscribe_error':
            if (frame.code === 'cursor_expired' || frame.code === 'replay_too_large') {
              this.push({ kind: 'resync', reason: `${frame.code}: resubscribing with a snapshot` });
              this.lastSeq.clear();
              subscribe(true);
              return;
            }
            // session_not_found, invalid_filter: retrying cannot help. The server keeps the socket
            // open for another subscribe, so close it ourselves, or the iterator would never end.
            outcome = 'fatal';
            this.failed = {
              status: null,
              code: frame.code ?? null,
              message: frame.message ?? 'subscribe failed',
            };
            this.push({ kind: 'frame', frame });
            ws.close(1000);
            return;
          case 'snapshot':
            // The snapshot carries no `seq` (its in-flight events are streaming-only, seq null): what
            // the client knew is stale, so hole checking starts again from the first live event.
            this.lastSeq.clear();
            if (frame.snapshot_at_event_id) this.lastEventId = frame.snapshot_at_event_id;
            // A server that has released nothing yet has no id to resume from: without a cursor, the
            // next connect takes a snapshot again rather than silently starting live.
            else if (this.lastEventId === null) this.wantSnapshot = true;
            break;
          case 'event': {
            const event = frame.event as WireEvent;
            if (this.lastEventId !== null && event.id <= this.lastEventId) return; // duplicate
            this.lastEventId = event.id;
            this.wantSnapshot = false;
            this.checkSeq(event);
            break;
          }
        }
        this.push({ kind: 'frame', frame });
      });
      ws.addEventListener('close', () => resolve(outcome));
      ws.addEventListener('error', () => undefined);
    });
  }

  /**
   * Reports a hole in a session's `seq`: only meaningful when the subscription gets every persisted
   * event of the session, which the server's `subscribe_ack.resolved_filter` says (not the filter asked for).
   */
  private checkSeq(event: WireEvent): void {
    if (!this.seqComplete) return;
    if (event.seq === null || event.seq === undefined || event.session_id === 'system') return;
    if (!this.withWorkers && event.session_id !== this.options.sessionId) return;
    const last = this.lastSeq.get(event.session_id);
    if (last !== undefined && event.seq > last + 1) {
      this.push({ kind: 'gap', session_id: event.session_id, after_seq: last, next_seq: event.seq });
    }
    if (last === undefined || event.seq > last) this.lastSeq.set(event.session_id, event.seq);
  }
}

/**
 * Whether a resolved filter (`subscribe_ack.resolved_filter`) passes every event that carries a `seq`:
 * no actor filter, and no type filter or one listing every catalog type (what `preset:full` expands to;
 * streaming-only types carry `seq: null`, so they do not matter here).
 */
export function receivesEverySeq(resolved: unknown): boolean {
  if (resolved === null || typeof resolved !== 'object') return false;
  const { event_types, actors } = resolved as { event_types?: unknown; actors?: unknown };
  if (actors !== null) return false;
  if (event_types === null) return true;
  if (!Array.isArray(event_types)) return false;
  const types = new Set(event_types);
  for (const type of CATALOG.keys()) if (!types.has(type)) return false;
  return true;
}
