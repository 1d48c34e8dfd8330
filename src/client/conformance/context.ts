import { openSseWire } from './sse-wire.js';
import { openWire, type WireClient } from './wire-client.js';

/** The transport the checks run over: the WebSocket protocol, or server-sent events. */
export type Transport = 'websocket' | 'sse';

export interface ConformanceInfo {
  readonly heartbeat_interval_ms: number;
  readonly max_queue_events: number;
  readonly replay_cap: number;
}

export type CheckOutcome =
  | { readonly status: 'pass'; readonly detail?: string }
  | {
      readonly status: 'fail';
      readonly message: string;
      readonly expected?: unknown;
      readonly seen?: unknown;
    }
  | { readonly status: 'skip'; readonly reason: string };

/** A failed expectation inside a check; the runner turns it into a `fail` outcome. */
export class CheckFailure extends Error {
  constructor(
    message: string,
    readonly expected?: unknown,
    readonly seen?: unknown,
  ) {
    super(message);
  }
}

export function expectEqual(what: string, expected: unknown, seen: unknown): void {
  if (JSON.stringify(expected) !== JSON.stringify(seen)) throw new CheckFailure(what, expected, seen);
}

export function expectTrue(what: string, condition: boolean, seen?: unknown): void {
  if (!condition) throw new CheckFailure(what, undefined, seen);
}

/**
 * The model every session made by the checks is created with: the scripted model the checks drive (any
 * `scripted:*` name serves), under a name that marks the session as a conformance run's, so `metis
 * sessions` can leave it out (session-commands.ts) and it never passes for one of the user's own.
 */
export const CONFORMANCE_MODEL = 'scripted:conformance';

/** What a check may use: the server under test, its hooks when present, and cleanup. */
export class CheckContext {
  private readonly clients: WireClient[] = [];
  /** Every session the checks made, ended when the run is over (endSessions). */
  readonly sessions: string[] = [];
  /** Every full-filter stream recorded, for the invariant checks. */
  readonly recorded: any[][] = [];

  constructor(
    readonly url: string,
    readonly info: ConformanceInfo | null,
    private readonly token?: string,
    readonly transport: Transport = 'websocket',
    /** Where sessions are made, when not at `url` (runner.ts RunOptions.sessionsUrl). */
    private readonly sessionsUrl: string = url,
  ) {}

  async api(
    method: string,
    path: string,
    body?: unknown,
    at: string = this.url,
  ): Promise<{ status: number; body: any }> {
    const headers: Record<string, string> = {};
    if (body !== undefined || method !== 'GET') headers['content-type'] = 'application/json';
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const response = await fetch(`${at}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  }

  async newSession(): Promise<string> {
    const created = await this.api('POST', '/sessions', { model: CONFORMANCE_MODEL }, this.sessionsUrl);
    expectEqual('POST /sessions answers 201', 201, created.status);
    this.sessions.push(created.body.session_id as string);
    return created.body.session_id as string;
  }

  /**
   * Ends every session the checks made (`abandoned`: a check is not a conversation), so a run against
   * a server of the user's leaves no session open; best effort, as a failed check may leave a turn in
   * flight (409) that the server ends on its own.
   */
  async endSessions(): Promise<void> {
    for (const session of this.sessions.splice(0)) {
      await this.api(
        'POST',
        `/sessions/${encodeURIComponent(session)}/end`,
        { disposition: 'abandoned' },
        this.sessionsUrl,
      ).catch(() => {});
    }
  }

  /**
   * Handshake + WebSocket; with `subscribe`, sends it and waits for the ack or the error. Over SSE the
   * subscription is the request, and waits the same way.
   */
  async attach(
    sessionId: string,
    subscribe: { filter: unknown; since?: string | null; snapshot?: boolean } | null = {
      filter: 'preset:full',
    },
    options: { answerPings?: boolean; protocolPongs?: boolean; record?: boolean } = {},
  ): Promise<WireClient> {
    let client: WireClient;
    if (this.transport === 'sse') {
      if (subscribe === null) throw new Error('SSE subscribes with the request: a WebSocket-only check');
      client = await openSseWire(
        this.url,
        sessionId,
        { since: null, snapshot: false, ...subscribe },
        this.token,
      );
    } else {
      const handshake = await this.api('GET', `/sessions/${sessionId}`);
      expectEqual(`GET /sessions/${sessionId} answers 200`, 200, handshake.status);
      client = await openWire(handshake.body.ws_url, {
        answerPings: options.answerPings,
        protocolPongs: options.protocolPongs,
        token: this.token,
      });
      if (subscribe) client.send({ type: 'subscribe', since: null, snapshot: false, ...subscribe });
    }
    this.clients.push(client);
    if (subscribe) {
      await client.waitFor(
        (f) => f.type === 'subscribe_ack' || f.type === 'subscribe_error',
        10_000,
        'subscribe_ack',
      );
      if (options.record !== false && subscribe.filter === 'preset:full') this.recorded.push(client.frames);
    }
    return client;
  }

  async submit(sessionId: string, message: string): Promise<string> {
    const response = await this.api('POST', `/sessions/${sessionId}/turns`, { message });
    expectEqual(`POST /sessions/${sessionId}/turns answers 202`, 202, response.status);
    return response.body.turn_id as string;
  }

  turnEnd(client: WireClient, turnId: string, timeoutMs = 15_000): Promise<any> {
    return client.waitFor(
      (f) =>
        f.type === 'event' &&
        f.event.turn_id === turnId &&
        (f.event.type === 'turn.completed' || f.event.type === 'turn.cancelled'),
      timeoutMs,
      `the end of turn ${turnId}`,
    );
  }

  eventOf(
    client: WireClient,
    type: string,
    predicate: (event: any) => boolean = () => true,
    timeoutMs = 15_000,
  ): Promise<any> {
    return client
      .waitFor((f) => f.type === 'event' && f.event.type === type && predicate(f.event), timeoutMs, type)
      .then((f) => f.event);
  }

  closeAll(): void {
    for (const client of this.clients) client.close();
    this.clients.length = 0;
  }
}

/** Event types of a turn in order, with runs of deltas collapsed to one entry. */
export function turnShape(events: readonly any[], turnId: string, sessionId?: string): string[] {
  const out: string[] = [];
  for (const event of events) {
    if (event.turn_id !== turnId || (sessionId && event.session_id !== sessionId)) continue;
    const isDelta = event.type.endsWith('.delta') || event.type === 'tool.use_input_delta';
    const label = isDelta ? `${event.type}*` : event.type;
    if (isDelta && out[out.length - 1] === label) continue;
    out.push(label);
  }
  return out;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
