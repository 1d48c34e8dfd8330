import { randomBytes } from 'node:crypto';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import { newId } from '../events/ids.js';
import { AcceptBuffer } from './accept-buffer.js';
import { CLOSE, type SubscribeFrame } from './client-frames.js';
import { type IntentTarget, readClientFrame } from './client-intents.js';
import { type CloseCause, type ConnectionDeps, NO_COUNTERS, type StreamCounters } from './connection-deps.js';
import { EventFrames } from './event-frames.js';
import { type ConnectionParts, hasFaults, installFaults, SAME_REPLAY } from './faults.js';
import { OutboundQueue, type QueueEvents } from './outbound-queue.js';
import type { ReplayFrame } from './replay-merge.js';
import type { StreamTarget } from './stream-hub.js';
import type { FrameType, StreamTransport, TransportKind } from './stream-transport.js';
import type { ResolvedFilter } from './subscription-filter.js';
import { planSubscription } from './subscription-plan.js';

export type {
  CloseCause,
  ConnectionDeps,
  ReplayOutcome,
  StreamCounters,
  StreamOptions,
} from './connection-deps.js';

/** `subscribing`: the store's reads of a subscribe are under way; what is released meanwhile is held. */
type State = 'awaiting_subscribe' | 'subscribing' | 'live' | 'closed';

/** Subscribe attempts that may each find the accept bound passed during their reads before giving up. */
const MAX_PLAN_ATTEMPTS = 4;

const TOO_SLOW_REASON = JSON.stringify({
  code: 'client_too_slow',
  message: 'Outbound queue overflowed; reconnect with replay.',
});

/** How the bus names a client's subscription: this, then the connection and the session. */
const SUBSCRIPTION_PREFIX: Readonly<Record<TransportKind, string>> = {
  websocket: 'ws',
  sse: 'sse',
  'ai-sdk': 'ai-sdk',
  'ag-ui': 'ag-ui',
};

/**
 * One client attached to one session (streaming spec §3, §4, §8), over any transport
 * (stream-transport.ts): a WebSocket, an SSE response, or a turn's own AI SDK or AG-UI stream
 * (turn-transport.ts). One subscription core under every transport:
 *
 *   accept ──▶ AcceptBuffer (§3.7 step 1) ──subscribe──▶ planSubscription (store reads) ──▶ ack, snapshot
 *     or replay, seam, in one synchronous step with going live
 *   hub.deliver ──filter──▶ transport.encodeEvent ──▶ OutboundQueue (bounded, §8) ──▶ transport.write
 *   client frame ──▶ readClientFrame (client-intents.ts): subscribe, cancel, ping, pong, ack
 *   heartbeat tick ──▶ ping (JSON + protocol ping, or an SSE comment); three unanswered close it
 *
 * A client that lets its queue overflow is closed with 1008 `client_too_slow` and nobody else waits for
 * it. The conformance faults, when switched on, are installed around the transport, the accept buffer
 * and the cursor replay (faults.ts); nothing here checks a switch.
 */
export class ClientConnection implements StreamTarget, QueueEvents, IntentTarget {
  readonly id = newId('conn');
  private state: State = 'awaiting_subscribe';
  private readonly accepted: AcceptBuffer;
  private filter: ((event: MetisEvent) => boolean) | null = null;
  private resolved: ResolvedFilter | null = null;
  private readonly transport: StreamTransport;
  private readonly cursorReplay: (frames: ReplayFrame[]) => ReplayFrame[];
  private readonly queue: OutboundQueue;
  private readonly counters: StreamCounters;
  /** Nonces of the pings sent since the client last answered one; three unanswered close it. */
  private pingNonces: string[] = [];
  private sentSinceTick = false;
  /** `finish` was asked while the subscribe's reads were under way: it runs once the stream is live. */
  private finishWhenLive = false;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly closed: () => void;

  constructor(
    transport: StreamTransport,
    readonly sessionId: string,
    private readonly deps: ConnectionDeps,
  ) {
    let parts: ConnectionParts = {
      transport,
      cursorReplay: SAME_REPLAY,
      accepted: new AcceptBuffer(
        deps.hub.sequencer.releasedThrough([sessionId]),
        deps.options.maxQueueEvents,
      ),
    };
    if (hasFaults(deps.faults))
      parts = installFaults(parts, deps.faults, {
        sessionId,
        runtime: deps.runtime,
        tooSlow: () => this.overflowed(this.queue.depth().events),
        sendError: (code, message) => this.sendError(code, message),
      });
    this.transport = parts.transport;
    this.cursorReplay = parts.cursorReplay;
    this.accepted = parts.accepted;
    this.counters = deps.counters ?? NO_COUNTERS;
    this.queue = new OutboundQueue(this.transport, deps.options, this);
    deps.hub.attach(this);
    this.transport.listen({
      message: (data, isBinary) => {
        if (this.state !== 'closed') readClientFrame(this, deps, data, isBinary);
      },
      // A protocol pong (every WebSocket library answers protocol pings by itself) is liveness too.
      pong: () => {
        this.pingNonces = [];
      },
      close: () => this.dispose('client_closed'),
      error: (error) => deps.logger.debug({ conn: this.id, err: error.message }, `${transport.kind} error`),
      drain: () => this.queue.flush(),
    });
    this.heartbeat = setInterval(() => this.tick(), deps.options.heartbeatIntervalMs);
    this.heartbeat.unref();
    this.closed = deps.opened?.(this) ?? (() => undefined);
  }

  /** Frames waiting in the outbound queue, for the metrics' queue depth gauges. */
  queueDepth(): { events: number; bytes: number } {
    return this.queue.depth();
  }

  wantsWorkers(): boolean {
    return this.resolved === null || this.resolved.include_worker_sessions;
  }

  deliver(event: MetisEvent, frames: EventFrames): void {
    if (this.state === 'awaiting_subscribe' || this.state === 'subscribing') {
      this.accepted.add(event);
      return;
    }
    if (this.state !== 'live' || !this.filter!(event)) return;
    this.enqueue(this.transport.encodeEvent(frames));
  }

  /**
   * Closes a stream this node can no longer feed (a cluster node that lost its broker, for a session
   * another node runs; a store that cannot be read): an `error` frame naming why, then close code 1013,
   * so the client reconnects, to this node later or to another now, with its cursor.
   */
  closeFor(code: string, message: string, cause: CloseCause = 'broker_unavailable'): void {
    if (this.state === 'closed') return;
    this.sendError(code, message);
    this.queue.writeAll();
    // A close reason holds at most 123 bytes: the message went in the error frame.
    this.transport.close(CLOSE.tryAgainLater, JSON.stringify({ code }).slice(0, 123));
    this.dispose(cause);
  }

  /** Closes from the server side (shutdown). */
  shutdown(): void {
    if (this.state === 'closed') return;
    // What is queued (the cancellations of the shutdown itself, say) goes out before the close frame.
    this.queue.writeAll();
    this.transport.close(CLOSE.serverShutdown, 'server shutting down');
    this.dispose('shutdown');
  }

  /**
   * Ends a stream that has an end of its own (a turn's: turn-subscription.ts) once what is queued has gone
   * out; a reader that stops reading before that still meets the queue bound.
   */
  finish(): void {
    if (this.state === 'closed') return;
    if (this.state === 'subscribing') {
      this.finishWhenLive = true;
      return;
    }
    this.queue.onceEmpty(() => {
      this.transport.close(CLOSE.normal, '');
      this.dispose('turn_ended');
    });
  }

  /** Leaves before anything was written (the request that opened it was refused): no frame, no count. */
  abandon(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    clearInterval(this.heartbeat);
    this.deps.hub.detachTarget(this);
    this.queue.close();
    this.closed();
  }

  /** Subscribes without a frame from the client: an SSE request carries its subscription in its URL. */
  subscribeWith(frame: SubscribeFrame): void {
    if (this.state === 'awaiting_subscribe') this.subscribe(frame);
  }

  // IntentTarget: what the client's frames do (client-intents.ts).

  awaitingSubscribe(): boolean {
    return this.state === 'awaiting_subscribe';
  }

  subscribe(frame: SubscribeFrame): void {
    if (this.state === 'live' || this.state === 'subscribing') {
      this.sendError('already_subscribed', 'this connection is already subscribed');
      return;
    }
    this.state = 'subscribing';
    void this.plan(frame, 1);
  }

  /**
   * Reads what the subscribe needs of the store, holding what is released meanwhile, then goes live.
   * When more than the accept bound arrived during the reads, what was held is gone: it starts again,
   * served by cursor from where the socket was accepted.
   */
  private async plan(frame: SubscribeFrame, attempt: number): Promise<void> {
    const { early, acceptedAfterId, overflows } = this.accepted;
    this.accepted.holdFromNow();
    const accepted = this.accepted;
    const subscriber = {
      sessionId: this.sessionId,
      get buffer() {
        return accepted.events;
      },
      early,
      acceptedAfterId,
    };
    let ready: Awaited<ReturnType<typeof planSubscription>>;
    try {
      ready = await planSubscription(this.deps, subscriber, frame, this.cursorReplay);
    } catch (error) {
      if (this.state !== 'subscribing') return;
      this.deps.logger.warn({ conn: this.id, err: (error as Error).message }, 'subscribe: store read failed');
      this.closeFor(
        'store_unavailable',
        'The store could not be read for this subscribe; reconnect.',
        'store_unavailable',
      );
      return;
    }
    // Closed meanwhile (the client left, a shutdown): nothing to send.
    if (this.state !== 'subscribing') return;
    if (this.accepted.overflows !== overflows) {
      if (attempt < MAX_PLAN_ATTEMPTS) return this.plan(frame, attempt + 1);
      this.closeFor(
        'server_busy',
        'Events arrived faster than this subscribe could be served; reconnect.',
        'store_unavailable',
      );
      return;
    }
    const plan = ready.ok ? ready.complete() : ready;
    if (!plan.ok) {
      this.state = 'awaiting_subscribe';
      // The buffer stays whole: a later subscribe on this socket may still rely on it.
      if (early) this.accepted.backToCursor();
      if (plan.outcome !== null) this.counters.replay(plan.outcome, plan.events);
      this.subscribeError(plan.code, plan.message);
      return;
    }
    if (plan.kind === 'replay') this.counters.replay('served', plan.replay.length);
    this.resolved = plan.resolved;
    this.filter = plan.matches;
    this.state = 'live';
    // The ack, the snapshot, the replay (at most `replayCap` events) and the seam (at most
    // `maxQueueEvents` buffered before subscribe) go straight to the socket: they are one bounded burst,
    // not a backlog, and must not count against the live queue's bound. Live frames queue behind them
    // until the socket drains; what was queued before (an error, a pong) goes first.
    this.queue.flush();
    const ack = JSON.stringify({
      type: 'subscribe_ack',
      resolved_filter: plan.resolved,
      since: frame.since,
      snapshot: frame.snapshot,
      replay_event_count: plan.replay.length,
    });
    // Encoded in the transport's framing and written in one piece.
    const burst: Buffer[] = [this.transport.encode(ack, 'subscribe_ack')];
    if (plan.snapshot !== null) burst.push(this.transport.encode(plan.snapshot, 'snapshot'));
    for (const { id, frame: text } of plan.replay) burst.push(this.transport.encode(text, 'event', id));
    for (const event of plan.seam) burst.push(this.transport.encodeEvent(new EventFrames(event)));
    this.accepted.clear();
    this.transport.write(burst.length === 1 ? burst[0]! : Buffer.concat(burst));
    this.deps.bus.emit({
      type: 'bus.subscriber_registered',
      session_id: SYSTEM_SESSION_ID,
      payload: {
        subscription_name: this.subscriptionName(),
        filter: {
          session_ids: [...plan.sessionIds],
          event_types: plan.resolved.event_types,
          actors: plan.resolved.actors,
        },
        fast_path: true,
      },
    });
    if (this.finishWhenLive) this.finish();
  }

  subscribeError(code: string, message: string): void {
    this.send('subscribe_error', JSON.stringify({ type: 'subscribe_error', code, message }));
    if (!this.transport.singleSubscription) return;
    // An SSE stream carries one subscription: the error goes out, then the stream ends.
    this.queue.flush();
    this.transport.close(CLOSE.subscribeRefused, JSON.stringify({ code, message }));
    this.dispose('protocol_error');
  }

  sendError(code: string, message: string): void {
    this.send('error', JSON.stringify({ type: 'error', code, message }));
  }

  pong(nonce: string): void {
    this.send('pong', JSON.stringify({ type: 'pong', nonce }));
  }

  ponged(nonce: string): void {
    if (this.pingNonces.includes(nonce)) this.pingNonces = [];
  }

  refuseBinary(): void {
    this.transport.close(CLOSE.unsupportedData, 'binary frames are not part of the protocol');
    this.dispose('protocol_error');
  }

  // QueueEvents: what the outbound queue reports (outbound-queue.ts).

  /** The queue passed a bound: the client stopped reading; it is closed with 1008 (§8.2). */
  overflowed(queued: number): void {
    if (this.state === 'closed') return;
    this.deps.logger.warn(
      { conn: this.id, session_id: this.sessionId, queued },
      'client too slow: outbound queue overflowed; closing with 1008',
    );
    this.queue.close();
    this.transport.close(CLOSE.clientTooSlow, TOO_SLOW_REASON);
    this.dispose('client_too_slow');
  }

  /**
   * Tells a client that its outbound queue passed half a bound, so it can shed load (a narrower filter,
   * or reconnect with a cursor later) before the 1008 close. The frame goes to the socket ahead of the
   * queued ones: it carries no event, so it cannot break their order, and the client reads it as soon as
   * it reads anything. False when nothing was told.
   */
  lagging(queued: number, bytes: number): boolean {
    // Before subscribe there is nothing to shed, and after a close frame nothing may follow it.
    if (this.state !== 'live' || !this.transport.isOpen()) return false;
    const { maxQueueEvents, maxQueueBytes } = this.deps.options;
    const warning = JSON.stringify({
      type: 'lag_warning',
      queued_events: queued,
      queued_bytes: bytes,
      limit_events: maxQueueEvents,
      limit_bytes: maxQueueBytes,
    });
    const frame = this.transport.encode(warning, 'lag_warning');
    // The protocol has no such frame (a turn's AI SDK or AG-UI stream): the episode is still one.
    if (frame.length === 0) return true;
    this.counters.lagWarning();
    this.transport.write(frame);
    return true;
  }

  flushFailed(error: Error): void {
    this.deps.logger.debug({ conn: this.id, err: error.message }, 'flush failed');
  }

  /**
   * Queues a control frame. `activity` is false for the server's own pings, which must not count as
   * traffic that makes the next ping unnecessary.
   */
  private send(type: FrameType, text: string, activity = true): void {
    if (this.state === 'closed') return;
    this.enqueue(this.transport.encode(text, type), activity);
  }

  /** Queues a frame; one a transport encodes to nothing (a turn's stream, other turns' events) is no frame. */
  private enqueue(frame: Buffer, activity = true): void {
    if (frame.length === 0) return;
    if (activity) this.sentSinceTick = true;
    this.queue.push(frame);
  }

  private tick(): void {
    if (this.state === 'closed') return;
    if (!this.transport.answersPings) {
      // Nothing can answer (SSE, a turn's stream): a comment keeps proxies and the client's own
      // timeout from closing it.
      if (!this.sentSinceTick) this.transport.ping();
      this.sentSinceTick = false;
      return;
    }
    if (this.deps.hub.heartbeatsHeld(this.sessionId)) {
      this.pingNonces = [];
      this.sentSinceTick = false;
      return;
    }
    if (this.pingNonces.length >= 3) {
      this.transport.close(
        CLOSE.heartbeatTimeout,
        JSON.stringify({ code: 'heartbeat_timeout', message: 'three pings unanswered' }),
      );
      this.dispose('heartbeat_timeout');
      return;
    }
    if (!this.sentSinceTick) {
      const nonce = randomBytes(6).toString('hex');
      this.pingNonces.push(nonce);
      this.send('ping', JSON.stringify({ type: 'ping', nonce }), false);
      // A WebSocket protocol ping alongside: generic clients (wscat, websocat, browsers) never answer
      // the JSON one, but their library answers this one, and its pong clears the count (§3.8).
      this.transport.ping();
    }
    this.sentSinceTick = false;
  }

  private subscriptionName(): string {
    return `${SUBSCRIPTION_PREFIX[this.transport.kind]}:${this.id}:${this.sessionId}`;
  }

  private dispose(cause: CloseCause): void {
    if (this.state === 'closed') return;
    const wasLive = this.state === 'live';
    this.state = 'closed';
    this.counters.connectionClosed(cause);
    const reason = cause === 'shutdown' ? 'shutdown' : 'client_disconnect';
    clearInterval(this.heartbeat);
    this.deps.hub.detachTarget(this);
    this.queue.close();
    this.accepted.clear();
    this.closed();
    if (wasLive) {
      try {
        this.deps.bus.emit({
          type: 'bus.subscriber_unregistered',
          session_id: SYSTEM_SESSION_ID,
          payload: { subscription_name: this.subscriptionName(), reason },
        });
      } catch (error) {
        this.deps.logger.debug({ err: (error as Error).message }, 'could not record unsubscribe');
      }
    }
  }
}
