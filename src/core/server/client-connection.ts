import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { EventBus } from '../bus/event-bus.js';
import { isMetisError } from '../errors.js';
import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import { newId } from '../events/ids.js';
import type { Runtime } from '../runtime/runtime.js';
import { selfAndDescendants } from '../runtime/session-lineage.js';
import { CANCEL_REASONS, type CancelReason, isCancelReason } from '../runtime/turn-runner.js';
import { storedEventBefore } from '../store/session-as-of.js';
import type { TraceStore } from '../store/trace-store.js';
import { cursorProblem } from './cursor.js';
import { type FaultSwitches, NO_FAULTS } from './faults.js';
import {
  CLOSE,
  ClientFrameSchema,
  depthOf,
  describeFrameIssue,
  KNOWN_FRAME_FIELDS,
  MAX_FRAME_DEPTH,
  type SubscribeFrame,
} from './frames.js';
import { mergeReplay, mergeRows, type ReplayFrame, unionById } from './replay-merge.js';
import { buildSnapshot } from './snapshot.js';
import { snapshotPoint } from './snapshot-point.js';
import { isQuestionToUser, type StreamHub, type StreamTarget } from './stream-hub.js';
import type { StreamTransport } from './stream-transport.js';
import {
  compileFilter,
  type ResolvedFilter,
  resolveFilter,
  sessionIdsProblem,
  wantsStreaming,
} from './subscription-filter.js';
import type { EventFrames } from './wire-frame.js';

export interface StreamOptions {
  readonly maxQueueEvents: number;
  readonly maxQueueBytes: number;
  readonly replayCap: number;
  readonly heartbeatIntervalMs: number;
  readonly retentionDays: number;
  /** Socket buffer above which queued frames wait for 'drain'. */
  readonly socketHighWaterMark: number;
}

/** Why a connection closed, as `metis_stream_closes_total` counts it. */
export type CloseCause =
  | 'client_too_slow'
  | 'heartbeat_timeout'
  | 'client_closed'
  | 'protocol_error'
  | 'shutdown'
  | 'broker_unavailable';
export type ReplayOutcome = 'served' | 'cursor_expired' | 'replay_too_large';

/**
 * What a connection reports to the server's metrics (metrics.ts). Called on rare transitions only (a
 * close, a warning, a subscribe), never per event; queue depths are read at scrape time instead.
 */
export interface StreamCounters {
  connectionClosed(cause: CloseCause): void;
  lagWarning(): void;
  replay(outcome: ReplayOutcome, events: number): void;
}

const NO_COUNTERS: StreamCounters = {
  connectionClosed: () => undefined,
  lagWarning: () => undefined,
  replay: () => undefined,
};

export interface ConnectionDeps {
  readonly hub: StreamHub;
  readonly store: TraceStore;
  readonly runtime: Runtime;
  readonly bus: EventBus;
  readonly options: StreamOptions;
  readonly logger: Logger;
  readonly faults?: FaultSwitches;
  readonly counters?: StreamCounters;
  /**
   * A cluster: runs a request on the node that runs the session, and resolves with its answer's status
   * and body; null when this node runs it (or may take it), and the request is run here.
   */
  readonly runElsewhere?: (
    sessionId: string,
    request: { method: string; url: string; body: unknown },
  ) => Promise<{ status: number; body: string } | null>;
}

type State = 'awaiting_subscribe' | 'live' | 'closed';

const TOO_SLOW_REASON = JSON.stringify({
  code: 'client_too_slow',
  message: 'Outbound queue overflowed; reconnect with replay.',
});
const NO_FRAME = Buffer.alloc(0);

/**
 * Connections with queued frames, flushed together in one immediate: an event that reaches 100
 * clients schedules one callback, not 100.
 */
let flushQueue: ClientConnection[] = [];

function runFlushQueue(): void {
  const due = flushQueue;
  flushQueue = [];
  for (const connection of due) connection.scheduledFlush();
}

/**
 * One client attached to one session (streaming spec §3, §4, §8), over a WebSocket or an SSE response
 * (stream-transport.ts): one subscription core under every transport. Live events are buffered from
 * accept; subscribe sends the ack, then the snapshot or the replay, then drains the buffer past what
 * was sent, so the seam has no gap and no duplicate (§3.7). Frames go through a bounded queue; a
 * client that lets it overflow is closed with 1008 and nobody else waits for it.
 */
export class ClientConnection implements StreamTarget {
  readonly id = newId('conn');
  private state: State = 'awaiting_subscribe';
  /** Every event released since accept, until subscribe (§3.7 step 1), while `early` is false. */
  private buffer: MetisEvent[] = [];
  /**
   * Set once more than `maxQueueEvents` arrived before subscribe: the buffer is dropped and the socket
   * is served by cursor instead, from `acceptedAfterId` out of the store and RecentStreams. Memory
   * stays bounded and a socket is never closed merely for being early (issue 14 obs. 8).
   */
  private early = false;
  /** The last event released before accept: `buffer` holds everything after it. */
  private readonly acceptedAfterId: string | null;
  private filter: ((event: MetisEvent) => boolean) | null = null;
  private resolved: ResolvedFilter | null = null;
  private sessionIds = new Set<string>();
  /** Encoded frames; event frames are shared with every other client of the transport that gets them. */
  private readonly queue: Buffer[] = [];
  private queueHead = 0;
  private queuedBytes = 0;
  private flushScheduled = false;
  /**
   * Set when a lag_warning went out; cleared once the queue drains below a quarter of both bounds, so
   * a client that hovers around half gets one warning per episode, not one per frame.
   */
  private lagWarned = false;
  private readonly counters: StreamCounters;
  /** Nonces of the pings sent since the client last answered one; three unanswered close it. */
  private pingNonces: string[] = [];
  private sentSinceTick = false;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly faults: FaultSwitches;
  private readonly held: Buffer[] = [];
  private dropNextLive = false;

  constructor(
    private readonly transport: StreamTransport,
    readonly sessionId: string,
    private readonly deps: ConnectionDeps,
  ) {
    this.faults = deps.faults ?? NO_FAULTS;
    this.counters = deps.counters ?? NO_COUNTERS;
    this.acceptedAfterId = deps.hub.sequencer.releasedThrough([sessionId]);
    deps.hub.attach(this);
    transport.listen({
      message: (data, isBinary) => this.onMessage(data, isBinary),
      // A protocol pong (every WebSocket library answers protocol pings by itself) is liveness too.
      pong: () => {
        if (!this.faults.jsonOnlyLiveness) this.pingNonces = [];
      },
      close: () => this.dispose('client_closed'),
      error: (error) => deps.logger.debug({ conn: this.id, err: error.message }, `${transport.kind} error`),
      drain: () => this.flush(),
    });
    this.heartbeat = setInterval(() => this.tick(), deps.options.heartbeatIntervalMs);
    this.heartbeat.unref();
  }

  /**
   * Why a replay from `since` would miss streaming events the filter asks for, or null: they were
   * dropped from memory (RecentStreams), and this connection's own buffer does not hold them either
   * (it holds everything after `acceptedAfterId`).
   */
  private streamingGap(
    filter: ResolvedFilter,
    sessionIds: ReadonlySet<string>,
    since: string,
  ): string | null {
    const bufferHasAll = !this.early && (this.acceptedAfterId === null || since >= this.acceptedAfterId);
    if (bufferHasAll || !wantsStreaming(filter) || !this.deps.hub.recent.droppedAfter(sessionIds, since)) {
      return null;
    }
    const window = this.deps.hub.recent.window;
    if (window === null)
      return 'Streaming events after this cursor are no longer kept in memory. Reconnect with snapshot: true.';
    const minutes = Math.round(window.minAgeMs / 60_000);
    return `Streaming events after this cursor are past the resume window (each session keeps those of the last ${minutes} minutes or its newest ${window.minEvents.toLocaleString('en-US')}, whichever is more). Reconnect with snapshot: true.`;
  }

  /**
   * The confirmation events of the session's workers after `since`, for a filter that leaves workers
   * out: they are the exception of the default view (docs/decisions.md "Delegated confirmations").
   */
  private workerQuestions(filter: ResolvedFilter, since: string): ReturnType<TraceStore['replayJson']> {
    const types = ['tool.confirmation_requested', 'tool.confirmation_resolved'].filter(
      (type) => filter.event_types === null || filter.event_types.includes(type),
    );
    const workers = selfAndDescendants(this.deps.runtime.sessions, this.sessionId).slice(1);
    if (filter.include_worker_sessions || types.length === 0 || workers.length === 0)
      return { rows: [], tooLarge: false };
    return this.deps.store.replayJson({
      sessionIds: workers,
      afterId: since === '' ? null : since,
      eventTypes: types,
      actors: filter.actors,
      limit: this.deps.options.replayCap,
    });
  }

  /**
   * The events after `since` this subscription gets, stored and streamed, in id order, as frames. Stored
   * rows newer than `upTo` (committed, not yet released: an older event is still waiting for its
   * commit) are left to arrive live, in order, after what was released before them.
   */
  private replayAfter(
    since: string,
    resolved: ResolvedFilter,
    sessionIds: ReadonlySet<string>,
    matches: (event: MetisEvent) => boolean,
    upTo: string | null,
  ): { frames: ReplayFrame[]; tooLarge: boolean } {
    const { store, hub, options } = this.deps;
    const own = store.replayJson({
      sessionIds: [...sessionIds],
      afterId: since === '' ? null : since,
      eventTypes: resolved.event_types,
      actors: resolved.actors,
      limit: options.replayCap,
    });
    const questions = this.workerQuestions(resolved, since);
    const rows = mergeRows(own.rows, questions.rows).filter((row) => upTo === null || row[0] <= upTo);
    // What this connection was handed between accept and subscribe joins the in-memory streams: it
    // may hold deltas of messages RecentStreams no longer keeps, and they must go out in id order
    // inside the replay, not after it.
    const buffered = this.buffer.filter((event) => event.id > since && this.carries(event, resolved));
    const streamed = wantsStreaming(resolved)
      ? hub.recent.after(sessionIds, since === '' ? null : since, options.replayCap + 1)
      : [];
    const live = unionById(streamed, buffered).filter(matches);
    // Counted after the merge: a bus event buffered since accept is also a stored row, sent once.
    const frames = mergeReplay(rows, live);
    return {
      frames,
      // More streaming events than the cap were read (the archive stops there): the replay would be short.
      tooLarge:
        own.tooLarge ||
        questions.tooLarge ||
        frames.length > options.replayCap ||
        streamed.length > options.replayCap,
    };
  }

  /**
   * Whether this stream carries an event by whose session it is: its own, its workers' when the filter
   * asks for them, and its workers' questions to the user always (docs/decisions.md "Delegated
   * confirmations").
   */
  private carries(event: MetisEvent, filter: ResolvedFilter): boolean {
    return event.session_id === this.sessionId || filter.include_worker_sessions || isQuestionToUser(event);
  }

  /** Frames waiting in the outbound queue, for the metrics' queue depth gauges. */
  queueDepth(): { events: number; bytes: number } {
    return { events: this.queue.length - this.queueHead, bytes: this.queuedBytes };
  }

  wantsWorkers(): boolean {
    return this.resolved === null || this.resolved.include_worker_sessions;
  }

  deliver(event: MetisEvent, frames: EventFrames): void {
    if (this.state === 'awaiting_subscribe') {
      // The buffer of §3.7 step 1 is bounded: a client that never subscribes (or stays after a
      // subscribe_error) must not make the server hold events for it without limit. Past the bound the
      // socket switches to its cursor (`early`); it has read nothing yet, so it is not too slow.
      if (this.early) return;
      if (this.buffer.length >= this.deps.options.maxQueueEvents) {
        if (this.faults.earlySocketQueue) {
          this.tooSlow();
          return;
        }
        this.buffer = [];
        this.early = true;
        return;
      }
      this.buffer.push(event);
      return;
    }
    if (this.state !== 'live' || !this.filter!(event)) return;
    if (this.faults.reorderCancel && this.holdForReorder(event, frames)) return;
    if (this.dropNextLive) {
      this.dropNextLive = false; // the drop-at-seam fault: lose the first live event after the seam
      return;
    }
    if (event.session_id !== this.sessionId && !this.sessionIds.has(event.session_id))
      this.sessionIds.add(event.session_id);
    if (this.faults.stopReasonError && event.type === 'message.complete' && 'error_class' in event.payload) {
      // The stop-reason-error fault: a failed call's message as it went out before issue 14.
      const { error_class: _, ...payload } = event.payload;
      this.send(
        JSON.stringify({ type: 'event', event: { ...event, payload: { ...payload, stop_reason: 'error' } } }),
      );
      return;
    }
    this.enqueue(this.transport.encodeEvent(frames));
  }

  /** The reorder-cancel fault: hold cancellation failures and send them after `turn.cancelled`. */
  private holdForReorder(event: MetisEvent, frames: EventFrames): boolean {
    if (
      (event.type === 'tool.failed' || event.type === 'llm.call_failed') &&
      event.payload.error_class === 'cancelled'
    ) {
      this.held.push(this.transport.encodeEvent(frames));
      return true;
    }
    if (event.type === 'turn.cancelled') {
      this.enqueue(this.transport.encodeEvent(frames));
      for (const held of this.held.splice(0)) this.enqueue(held);
      return true;
    }
    return false;
  }

  /** Closes from the server side (shutdown). */
  /**
   * Closes a stream this node can no longer feed (a cluster node that lost its broker, for a session
   * another node runs): an `error` frame naming why, then close code 1013, so the client reconnects,
   * to this node later or to another now, with its cursor.
   */
  closeFor(code: string, message: string): void {
    if (this.state === 'closed') return;
    this.sendError(code, message);
    if (this.transport.isOpen()) {
      for (let i = this.queueHead; i < this.queue.length; i += 1) this.transport.write(this.queue[i]!);
    }
    this.queue.length = 0;
    this.queueHead = 0;
    this.queuedBytes = 0;
    // A close reason holds at most 123 bytes: the message went in the error frame.
    this.transport.close(CLOSE.tryAgainLater, JSON.stringify({ code }).slice(0, 123));
    this.dispose('broker_unavailable');
  }

  shutdown(): void {
    if (this.state === 'closed') return;
    // What is queued (the cancellations of the shutdown itself, say) goes out before the close frame:
    // the queue is bounded, so writing it past the socket's high-water mark once is fine.
    if (this.transport.isOpen()) {
      for (let i = this.queueHead; i < this.queue.length; i += 1) this.transport.write(this.queue[i]!);
    }
    this.queue.length = 0;
    this.queueHead = 0;
    this.queuedBytes = 0;
    this.transport.close(CLOSE.serverShutdown, 'server shutting down');
    this.dispose('shutdown');
  }

  private onMessage(data: unknown, isBinary: boolean): void {
    if (this.state === 'closed') return;
    if (isBinary) {
      this.transport.close(CLOSE.unsupportedData, 'binary frames are not part of the protocol');
      this.dispose('protocol_error');
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(String(data));
    } catch {
      this.sendError('invalid_json', 'frame is not valid JSON');
      return;
    }
    if (depthOf(parsed) > MAX_FRAME_DEPTH) {
      this.sendError('invalid_frame', `frame nests deeper than ${MAX_FRAME_DEPTH}`);
      return;
    }
    const frame = ClientFrameSchema.safeParse(parsed);
    if (frame.success && this.faults.strictClientFrames) {
      if (frame.data.type === 'ack') {
        this.sendError('invalid_frame', 'type: unknown frame type "ack"');
        return;
      }
      const known = KNOWN_FRAME_FIELDS[frame.data.type]!;
      const extra = Object.keys(parsed as object).filter((key) => !known.includes(key));
      if (extra.length > 0) {
        this.sendError('invalid_frame', `frame: unrecognized keys ${extra.join(', ')}`);
        return;
      }
    }
    if (!frame.success) {
      const problem = describeFrameIssue(frame.error.issues);
      // A subscribe is answered with subscribe_ack or subscribe_error (§3.2), and a bad filter is
      // `invalid_filter` (§4.2) whether it names an unknown type or has the wrong shape.
      const badFilter =
        this.state === 'awaiting_subscribe' &&
        typeof parsed === 'object' &&
        (parsed as { type?: unknown } | null)?.type === 'subscribe' &&
        frame.error.issues[0]?.path[0] === 'filter';
      if (badFilter) this.subscribeError('invalid_filter', problem);
      else this.sendError('invalid_frame', problem);
      return;
    }
    const value = frame.data;
    switch (value.type) {
      case 'subscribe': {
        this.subscribe(value);
        return;
      }
      case 'cancel': {
        this.cancel(value.turn_id, value.reason);
        return;
      }
      case 'ping':
        if (!this.faults.ignorePings) this.send(JSON.stringify({ type: 'pong', nonce: value.nonce }));
        return;
      case 'pong':
        // Only an answer to a ping of ours proves the client is alive: its nonce must match (§3.8).
        if (this.pingNonces.includes(value.nonce)) this.pingNonces = [];
        return;
      case 'ack':
        // §2.2's client acknowledgement: accepted, and nothing to do (docs/decisions.md "Client frames").
        return;
    }
  }

  /** Subscribes without a frame from the client: an SSE request carries its subscription in its URL. */
  subscribeWith(frame: SubscribeFrame): void {
    if (this.state === 'awaiting_subscribe') this.subscribe(frame);
  }

  private subscribe(frame: SubscribeFrame): void {
    if (this.state === 'live') {
      this.sendError('already_subscribed', 'this connection is already subscribed');
      return;
    }
    const { runtime, store, hub, options } = this.deps;
    if (!runtime.hasSession(this.sessionId)) {
      this.subscribeError('session_not_found', `no session ${this.sessionId}`);
      return;
    }
    const resolution = resolveFilter(frame.filter);
    if (!resolution.ok) {
      this.subscribeError(
        'invalid_filter',
        `unknown event types in filter: ${resolution.unknown.join(', ')}`,
      );
      return;
    }
    const resolved = resolution.filter;
    // The workers a planner's stream carries are its own (streaming §7.2), as the hub routes them.
    const workers = hub.workersOf(this.sessionId);
    const scopeProblem = sessionIdsProblem(resolved, this.sessionId, workers);
    if (scopeProblem !== null) {
      this.subscribeError('invalid_filter', scopeProblem);
      return;
    }
    const sessionIds = new Set(
      resolved.session_ids ?? [this.sessionId, ...(resolved.include_worker_sessions ? workers : [])],
    );
    const matches = compileFilter(resolved, this.sessionId);
    const ack = (replayed: number) =>
      JSON.stringify({
        type: 'subscribe_ack',
        resolved_filter: resolved,
        since: frame.since,
        snapshot: frame.snapshot,
        replay_event_count: replayed,
      });

    let replayFrames: ReplayFrame[] = [];
    let skipUpTo: string | null = null;
    let snapshotFrame: string | null = null;
    if (frame.snapshot) {
      // Nothing released yet by this process (it just started): what is stored is all there is.
      const released =
        hub.sequencer.releasedThrough(sessionIds) ?? storedEventBefore(store.db, [...sessionIds], '~');
      let point = this.faults.snapshotLiveState
        ? released
        : snapshotPoint({
            runtime,
            db: store.db,
            recent: hub.recent,
            sessionId: this.sessionId,
            sessionIds,
            released,
            faults: this.faults,
          });
      if (point !== null && point !== released) {
        // What is in progress follows the snapshot as events (snapshot-point.ts); a replay too long to
        // follow it leaves the point where it was, with the additive fields describing the rest.
        const replay = this.replayAfter(point, resolved, sessionIds, matches, released);
        if (replay.tooLarge) point = released;
        else replayFrames = replay.frames;
      }
      skipUpTo = point;
      snapshotFrame = buildSnapshot(runtime, store.db, hub.recent, this.sessionId, point, this.faults);
    } else if (frame.since !== null || this.early) {
      // A live subscribe on an `early` socket is a replay from where the socket was accepted.
      const explicit = frame.since !== null;
      const since = frame.since ?? this.acceptedAfterId ?? '';
      const gap = this.streamingGap(resolved, sessionIds, since);
      const problem =
        (explicit ? cursorProblem(store, this.sessionId, since, options.retentionDays) : null) ??
        (gap !== null && !explicit
          ? 'Streaming events since this connection opened are no longer kept in memory (it waited long ' +
            'before subscribing). Subscribe with snapshot: true.'
          : gap);
      if (problem !== null) {
        this.counters.replay('cursor_expired', 0);
        this.subscribeError('cursor_expired', problem);
        return;
      }
      const replay = this.replayAfter(
        since,
        resolved,
        sessionIds,
        matches,
        hub.sequencer.releasedThrough(sessionIds),
      );
      replayFrames = replay.frames;
      if (replay.tooLarge) {
        // The buffer stays whole: a later subscribe on this socket may still rely on it.
        this.counters.replay('replay_too_large', replayFrames.length);
        this.subscribeError(
          'replay_too_large',
          `Gap exceeds replay limit of ${options.replayCap} events. Reconnect with snapshot: true.`,
        );
        return;
      }
      this.buffer = [];
      if (this.faults.duplicateReplayEvent && replayFrames.length > 0)
        replayFrames.push(replayFrames.at(-1)!);
      skipUpTo = since;
      this.counters.replay('served', replayFrames.length);
    }
    this.resolved = resolved;
    this.filter = matches;
    this.sessionIds = sessionIds;
    this.state = 'live';
    this.dropNextLive = this.faults.dropAtSeam === true;
    // The ack, the snapshot, the replay (at most `replayCap` events) and the seam (at most
    // `maxQueueEvents` buffered before subscribe) go straight to the socket: they are one bounded burst,
    // not a backlog, and must not count against the live queue's bound. Live frames queue behind them
    // until the socket drains.
    this.flush();
    // Encoded in the transport's framing and written in one piece.
    const encode = (text: string) => this.transport.encode(text);
    const burst: Buffer[] = [encode(ack(replayFrames.length))];
    if (snapshotFrame !== null) burst.push(encode(snapshotFrame));
    const replayed = new Set<string>();
    for (const { id, frame: text } of replayFrames) {
      replayed.add(id);
      burst.push(encode(text));
    }
    // The seam (§3.7): what arrived since accept, minus what the snapshot or the replay covered.
    const buffered = this.buffer;
    this.buffer = [];
    this.early = false;
    for (const event of buffered) {
      if (skipUpTo !== null && event.id <= skipUpTo) continue;
      if (replayed.has(event.id) || !matches(event)) continue;
      if (!this.carries(event, resolved)) continue;
      burst.push(encode(`{"type":"event","event":${JSON.stringify(event)}}`));
    }
    this.transport.write(burst.length === 1 ? burst[0]! : Buffer.concat(burst));
    this.deps.bus.emit({
      type: 'bus.subscriber_registered',
      session_id: SYSTEM_SESSION_ID,
      payload: {
        subscription_name: `${this.subscriptionPrefix()}:${this.id}:${this.sessionId}`,
        filter: { session_ids: [...sessionIds], event_types: resolved.event_types, actors: resolved.actors },
        fast_path: true,
      },
    });
  }

  /**
   * The `cancel` frame. A reason outside the catalog's `turn.cancelled.reason` enum cannot be
   * "propagated to turn.cancelled.payload.reason" (§4.3), so the cancel is refused with the allowed
   * values and the turn goes on (docs/decisions.md "The cancel reason"). A turn already cancelling or
   * ended is a no-op with no frame (§6.5); only a turn the session never had is `turn_not_found`.
   */
  private cancel(turnId: string, reason: string | undefined): void {
    if (reason !== undefined && !isCancelReason(reason) && !this.faults.silentCancelReason) {
      this.sendError(
        'invalid_frame',
        `reason: must be one of ${CANCEL_REASONS.join(', ')} (or absent, meaning user_cancel); ` +
          `turn ${turnId} was not cancelled`,
      );
      return;
    }
    const cancelReason = isCancelReason(reason) ? reason : 'user_cancel';
    const elsewhere = this.deps.runElsewhere;
    if (elsewhere !== undefined) {
      const url = `/sessions/${encodeURIComponent(this.sessionId)}/turns/${encodeURIComponent(turnId)}/cancel`;
      void elsewhere(this.sessionId, { method: 'POST', url, body: { reason: cancelReason } }).then(
        (answer) => {
          if (answer === null) this.cancelHere(turnId, cancelReason);
          else if (answer.status === 404) this.sendError('turn_not_found', errorMessageOf(answer.body));
          // Not run (the node running the session did not answer, or refused): the client must know
          // its cancel did not go through.
          else if (answer.status >= 300) this.sendError('cancel_failed', errorMessageOf(answer.body));
        },
        (error: unknown) => this.sendError('cancel_failed', (error as Error).message),
      );
      return;
    }
    this.cancelHere(turnId, cancelReason);
  }

  private cancelHere(turnId: string, cancelReason: CancelReason): void {
    try {
      const outcome = this.deps.runtime.cancelTurn(this.sessionId, turnId, cancelReason);
      if (outcome === 'already_ended' && this.faults.cancelEndedNotFound)
        this.sendError('turn_not_found', `turn ${turnId} is not in flight in session ${this.sessionId}`);
    } catch (error) {
      if (isMetisError(error)) {
        this.sendError('turn_not_found', error.message);
        return;
      }
      throw error;
    }
  }

  private subscribeError(code: string, message: string): void {
    this.send(JSON.stringify({ type: 'subscribe_error', code, message }));
    if (!this.transport.singleSubscription) return;
    // An SSE stream carries one subscription: the error goes out, then the stream ends.
    this.flush();
    this.transport.close(CLOSE.subscribeRefused, JSON.stringify({ code, message }));
    this.dispose('protocol_error');
  }

  /** How the bus names this client's subscription: `ws:` or `sse:`, then the connection and session. */
  private subscriptionPrefix(): string {
    return this.transport.kind === 'websocket' ? 'ws' : 'sse';
  }

  private sendError(code: string, message: string): void {
    this.send(JSON.stringify({ type: 'error', code, message }));
  }

  /**
   * Queues a frame and schedules a flush; overflowing the bound closes the client. `activity` is false
   * for the server's own pings, which must not count as traffic that makes the next ping unnecessary.
   */
  private send(text: string, activity = true): void {
    if (this.state === 'closed') return;
    this.enqueue(this.transport.encode(text), activity);
  }

  private enqueue(frame: Buffer, activity = true): void {
    if (this.state === 'closed') return;
    if (activity) this.sentSinceTick = true;
    this.queue.push(frame);
    this.queuedBytes += frame.length;
    let queued = this.queue.length - this.queueHead;
    // A burst (one large committed batch, or one frame near the byte cap) writes through at once while
    // the socket takes it, so only a client that really stopped reading reaches either bound.
    if (
      queued > this.deps.options.maxQueueEvents / 2 ||
      this.queuedBytes > this.deps.options.maxQueueBytes / 2
    ) {
      this.flush();
      queued = this.queue.length - this.queueHead;
    }
    if (queued > this.deps.options.maxQueueEvents || this.queuedBytes > this.deps.options.maxQueueBytes) {
      this.tooSlow();
      return;
    }
    if (
      !this.lagWarned &&
      (queued > this.deps.options.maxQueueEvents / 2 ||
        this.queuedBytes > this.deps.options.maxQueueBytes / 2)
    )
      this.warnLag(queued);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      if (flushQueue.length === 0) setImmediate(runFlushQueue);
      flushQueue.push(this);
    }
  }

  /** The flush scheduled by `enqueue`; a failure to write to one client must not skip the others. */
  scheduledFlush(): void {
    this.flushScheduled = false;
    try {
      this.flush();
    } catch (error) {
      this.deps.logger.debug({ conn: this.id, err: (error as Error).message }, 'flush failed');
    }
  }

  /** Writes queued frames while the socket takes them; the rest waits for 'drain'. */
  private flush(): void {
    if (this.state === 'closed' || !this.transport.isOpen()) return;
    // 'drain' only follows a write that took the socket past its own highWaterMark: a smaller limit
    // would stop here with no 'drain' to come, and the queued frames would wait for the next send.
    const limit = Math.max(this.deps.options.socketHighWaterMark, this.transport.writableHighWaterMark);
    if (this.queueHead >= this.queue.length) return;
    // Corking coalesces the frames of one flush into one socket write; they stay separate frames. The
    // frames are already encoded (wire-frame.ts), so they go to the socket as they are.
    this.transport.cork();
    while (this.queueHead < this.queue.length && this.transport.bufferedAmount() < limit) {
      const frame = this.queue[this.queueHead]!;
      this.queue[this.queueHead] = NO_FRAME;
      this.queueHead += 1;
      this.queuedBytes -= frame.length;
      this.transport.write(frame);
    }
    this.transport.uncork();
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
    }
    if (
      this.lagWarned &&
      this.queue.length - this.queueHead <= this.deps.options.maxQueueEvents / 4 &&
      this.queuedBytes <= this.deps.options.maxQueueBytes / 4
    )
      this.lagWarned = false;
  }

  /**
   * Tells a client that its outbound queue passed half a bound, so it can shed load (a narrower filter,
   * or reconnect with a cursor later) before the 1008 close. The frame goes to the socket ahead of the
   * queued ones: it carries no event, so it cannot break their order, and the client reads it as soon as
   * it reads anything.
   */
  private warnLag(queued: number): void {
    // Before subscribe there is nothing to shed, and after a close frame nothing may follow it.
    if (this.state !== 'live' || !this.transport.isOpen()) return;
    this.lagWarned = true;
    const { maxQueueEvents, maxQueueBytes } = this.deps.options;
    this.counters.lagWarning();
    this.transport.write(
      this.transport.encode(
        JSON.stringify({
          type: 'lag_warning',
          queued_events: queued,
          queued_bytes: this.queuedBytes,
          limit_events: maxQueueEvents,
          limit_bytes: maxQueueBytes,
        }),
      ),
    );
  }

  private tooSlow(): void {
    this.deps.logger.warn(
      { conn: this.id, session_id: this.sessionId, queued: this.queue.length - this.queueHead },
      'client too slow: outbound queue overflowed; closing with 1008',
    );
    this.queue.length = 0;
    this.queueHead = 0;
    this.queuedBytes = 0;
    this.transport.close(CLOSE.clientTooSlow, TOO_SLOW_REASON);
    this.dispose('client_too_slow');
  }

  private tick(): void {
    if (this.state === 'closed') return;
    if (!this.transport.answersPings) {
      // Nothing can answer (SSE): a comment keeps proxies and the client's own timeout from closing it.
      if (!this.sentSinceTick) this.transport.ping();
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
      this.send(JSON.stringify({ type: 'ping', nonce }), false);
      // A WebSocket protocol ping alongside: generic clients (wscat, websocat, browsers) never answer
      // the JSON one, but their library answers this one, and its pong clears the count (§3.8).
      if (!this.faults.jsonOnlyLiveness) this.transport.ping();
    }
    this.sentSinceTick = false;
  }

  private dispose(cause: CloseCause): void {
    if (this.state === 'closed') return;
    const wasLive = this.state === 'live';
    this.state = 'closed';
    this.counters.connectionClosed(cause);
    const reason = cause === 'shutdown' ? 'shutdown' : 'client_disconnect';
    clearInterval(this.heartbeat);
    this.deps.hub.detachTarget(this);
    this.buffer = [];
    if (wasLive) {
      try {
        this.deps.bus.emit({
          type: 'bus.subscriber_unregistered',
          session_id: SYSTEM_SESSION_ID,
          payload: { subscription_name: `${this.subscriptionPrefix()}:${this.id}:${this.sessionId}`, reason },
        });
      } catch (error) {
        this.deps.logger.debug({ err: (error as Error).message }, 'could not record unsubscribe');
      }
    }
  }
}

/** The message of an error body (`{error: {message}}`), or the body itself. */
function errorMessageOf(body: string): string {
  try {
    return (JSON.parse(body) as { error?: { message?: string } }).error?.message ?? body;
  } catch {
    return body;
  }
}
