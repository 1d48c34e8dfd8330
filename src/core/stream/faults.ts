import type { Runtime } from '../runtime/runtime.js';
import { isCancelReason } from '../runtime/turn-state.js';
import { AcceptBuffer } from './accept-buffer.js';
import {
  type ClientFrame,
  ClientFrameSchema,
  depthOf,
  KNOWN_FRAME_FIELDS,
  MAX_FRAME_DEPTH,
} from './client-frames.js';
import type { EventFrames } from './event-frames.js';
import type { ReplayFrame } from './replay-merge.js';
import type { FrameType, StreamTransport, TransportHandlers } from './stream-transport.js';

/**
 * Fault switches for testing the conformance suite: each breaks one guarantee on purpose, so a test can
 * show that the matching check fails. They exist only with `metis serve --conformance`.
 */
export interface FaultSwitches {
  /** Send the last replayed event twice. */
  readonly duplicateReplayEvent?: boolean;
  /** Drop the first live event buffered at the seam. */
  readonly dropAtSeam?: boolean;
  /** Never answer a client's ping. */
  readonly ignorePings?: boolean;
  /** Send `turn.cancelled` before the `tool.failed` / `llm.call_failed` it should follow. */
  readonly reorderCancel?: boolean;
  /** Cancel is not idempotent: a cancel of a turn that has ended answers turn_not_found / 404. */
  readonly cancelEndedNotFound?: boolean;
  /** A cancel `reason` outside the catalog's enum silently becomes `user_cancel`. */
  readonly silentCancelReason?: boolean;
  /** A failed model call streams `message.complete` with `stop_reason: "error"`, outside the spec's enum. */
  readonly stopReasonError?: boolean;
  /** Refuse unknown fields in client frames (and the `ack` frame), as before issue 14. */
  readonly strictClientFrames?: boolean;
  /** Close a socket that has not subscribed once `max_queue_events` arrive before its subscribe. */
  readonly earlySocketQueue?: boolean;
  /** Count only JSON pongs as liveness: no protocol pings, protocol pongs ignored. */
  readonly jsonOnlyLiveness?: boolean;
  /** A snapshot reads the runtime's live state and names the last released event, as before issue 14. */
  readonly snapshotLiveState?: boolean;
  /** A message still streaming is left out of the snapshot's events (only in `in_flight_events`). */
  readonly snapshotHidesPartial?: boolean;
  /** A pending confirmation is left out of the snapshot's events (only in `pending_confirmations`). */
  readonly snapshotHidesConfirmation?: boolean;
  /** Streaming events kept only in memory, for the last 4 finished messages, as before issue 14. */
  readonly shortStreamWindow?: boolean;
}

export const FAULT_NAMES = {
  'duplicate-replay': 'duplicateReplayEvent',
  'drop-at-seam': 'dropAtSeam',
  'ignore-pings': 'ignorePings',
  'reorder-cancel': 'reorderCancel',
  'cancel-ended-not-found': 'cancelEndedNotFound',
  'silent-cancel-reason': 'silentCancelReason',
  'stop-reason-error': 'stopReasonError',
  'strict-client-frames': 'strictClientFrames',
  'early-socket-queue': 'earlySocketQueue',
  'json-only-liveness': 'jsonOnlyLiveness',
  'snapshot-live-state': 'snapshotLiveState',
  'snapshot-hides-partial': 'snapshotHidesPartial',
  'snapshot-hides-confirmation': 'snapshotHidesConfirmation',
  'short-stream-window': 'shortStreamWindow',
} as const satisfies Record<string, keyof FaultSwitches>;

export type FaultName = keyof typeof FAULT_NAMES;

export const NO_FAULTS: FaultSwitches = Object.freeze({});

/**
 * What a client connection (client-connection.ts) hands over for the faults to bend: each part is the
 * protocol's own until a fault replaces it. A server without faults installs nothing, so no path of a
 * connection checks a switch, least of all the per-event one.
 */
export interface ConnectionParts {
  /** What the connection writes through and hears its client on: liveness, client frames, live events. */
  readonly transport: StreamTransport;
  /** A replay from a cursor, as it will be counted and sent. */
  readonly cursorReplay: (frames: ReplayFrame[]) => ReplayFrame[];
  /** What the connection holds between accept and subscribe. */
  readonly accepted: AcceptBuffer;
}

/** What a fault may do to the connection beyond its parts. */
export interface FaultContext {
  readonly sessionId: string;
  readonly runtime: Pick<Runtime, 'currentTurn' | 'sessions'>;
  /** Closes the connection with 1008 `client_too_slow`. */
  readonly tooSlow: () => void;
  /** Queues an `error` frame. */
  readonly sendError: (code: string, message: string) => void;
}

/** The replay of a cursor as it is: the part every connection without faults keeps. */
export const SAME_REPLAY = (frames: ReplayFrame[]): ReplayFrame[] => frames;

/** Whether any switch is on. */
export function hasFaults(faults: FaultSwitches | undefined): faults is FaultSwitches {
  return faults !== undefined && Object.values(faults).some(Boolean);
}

/**
 * The connection's parts with the switched-on faults installed around them (`metis serve --conformance
 * --fault …`). The snapshot faults (`snapshot*`, `shortStreamWindow`) live where snapshots and the
 * stream window are made, and the HTTP cancel's in http-api.ts.
 */
export function installFaults(
  parts: ConnectionParts,
  faults: FaultSwitches,
  context: FaultContext,
): ConnectionParts {
  const onTransport = TRANSPORT_FAULTS.some((name) => faults[name] === true);
  return {
    transport: onTransport ? new FaultyTransport(parts.transport, faults, context) : parts.transport,
    // Duplicate-replay: the last replayed event twice.
    cursorReplay: faults.duplicateReplayEvent
      ? (frames) => (frames.length > 0 ? [...frames, frames.at(-1)!] : frames)
      : parts.cursorReplay,
    accepted: faults.earlySocketQueue
      ? new ClosingAcceptBuffer(parts.accepted.acceptedAfterId, parts.accepted.bound, context.tooSlow)
      : parts.accepted,
  };
}

const TRANSPORT_FAULTS = [
  'reorderCancel',
  'dropAtSeam',
  'stopReasonError',
  'strictClientFrames',
  'ignorePings',
  'silentCancelReason',
  'cancelEndedNotFound',
  'jsonOnlyLiveness',
] as const satisfies readonly (keyof FaultSwitches)[];

const NOTHING = Buffer.alloc(0);

/** Early-socket-queue: a socket that has not subscribed is closed once the queue bound arrives before it. */
class ClosingAcceptBuffer extends AcceptBuffer {
  constructor(
    acceptedAfterId: string | null,
    bound: number,
    private readonly close: () => void,
  ) {
    super(acceptedAfterId, bound);
  }

  protected override overflow(): void {
    this.close();
  }
}

/**
 * The transport with the per-event, liveness and client-frame faults: the connection writes and reads
 * through it as through any transport.
 */
class FaultyTransport implements StreamTransport {
  /** Reorder-cancel: the frames of cancellation failures, held until `turn.cancelled`. */
  private readonly held: Buffer[] = [];
  /** Drop-at-seam: the first event after the subscribe's ack is lost. */
  private dropNext: boolean;

  constructor(
    private readonly inner: StreamTransport,
    private readonly faults: FaultSwitches,
    private readonly context: FaultContext,
  ) {
    this.dropNext = faults.dropAtSeam === true;
  }

  get kind(): StreamTransport['kind'] {
    return this.inner.kind;
  }

  get answersPings(): boolean {
    return this.inner.answersPings;
  }

  get singleSubscription(): boolean {
    return this.inner.singleSubscription;
  }

  get writableHighWaterMark(): number {
    return this.inner.writableHighWaterMark;
  }

  encodeEvent(frames: EventFrames): Buffer {
    const { event } = frames;
    if (this.faults.reorderCancel) {
      const cancellation =
        (event.type === 'tool.failed' || event.type === 'llm.call_failed') &&
        event.payload.error_class === 'cancelled';
      if (cancellation) {
        this.held.push(this.inner.encodeEvent(frames));
        return NOTHING;
      }
      if (event.type === 'turn.cancelled')
        return Buffer.concat([this.inner.encodeEvent(frames), ...this.held.splice(0)]);
    }
    if (this.dropNext) {
      this.dropNext = false;
      return NOTHING;
    }
    if (this.faults.stopReasonError && event.type === 'message.complete' && 'error_class' in event.payload) {
      // A failed call's message as it went out before issue 14.
      const { error_class: _, ...payload } = event.payload;
      const text = JSON.stringify({
        type: 'event',
        event: { ...event, payload: { ...payload, stop_reason: 'error' } },
      });
      return this.inner.encode(text, 'event', event.id);
    }
    return this.inner.encodeEvent(frames);
  }

  encode(text: string, type: FrameType, eventId: string | null = null): Buffer {
    return this.inner.encode(text, type, eventId);
  }

  ping(): void {
    // Json-only-liveness: no protocol ping alongside the JSON one (an SSE comment still goes out).
    if (!(this.faults.jsonOnlyLiveness && this.inner.answersPings)) this.inner.ping();
  }

  listen(handlers: TransportHandlers): void {
    const { strictClientFrames, ignorePings, silentCancelReason, cancelEndedNotFound } = this.faults;
    const bendsFrames = strictClientFrames || ignorePings || silentCancelReason || cancelEndedNotFound;
    this.inner.listen({
      ...handlers,
      // Json-only-liveness: a protocol pong is no sign of life.
      pong: this.faults.jsonOnlyLiveness ? () => undefined : handlers.pong,
      message: bendsFrames
        ? (data, isBinary) => this.clientFrame(data, isBinary, handlers)
        : handlers.message,
    });
  }

  isOpen(): boolean {
    return this.inner.isOpen();
  }

  bufferedAmount(): number {
    return this.inner.bufferedAmount();
  }

  write(data: Buffer): void {
    this.inner.write(data);
  }

  cork(): void {
    this.inner.cork();
  }

  uncork(): void {
    this.inner.uncork();
  }

  close(code: number, reason: string): void {
    this.inner.close(code, reason);
  }

  /** A valid client frame as the faults would have it answered; anything else goes on as it came. */
  private clientFrame(data: unknown, isBinary: boolean, handlers: TransportHandlers): void {
    const parsed = isBinary ? null : validFrame(data);
    const frame = parsed?.[1];
    const refusal = parsed === null ? null : this.refusal(...parsed);
    if (refusal !== null) {
      this.context.sendError(...refusal);
      return;
    }
    // Ignore-pings: a client's ping is never answered.
    if (frame?.type === 'ping' && this.faults.ignorePings) return;
    if (parsed !== null && this.silencedReason(parsed[1])) {
      // Silent-cancel-reason: a reason outside the enum silently becomes user_cancel.
      handlers.message(JSON.stringify({ ...parsed[0], reason: undefined }), false);
      return;
    }
    handlers.message(data, isBinary);
    // Cancel-ended-not-found: a cancel of a turn that has ended is not a no-op.
    if (frame?.type === 'cancel' && this.faults.cancelEndedNotFound && this.ended(frame.turn_id))
      this.context.sendError(
        'turn_not_found',
        `turn ${frame.turn_id} is not in flight in session ${this.context.sessionId}`,
      );
  }

  /** Strict-client-frames: unknown fields and the `ack` frame refused, as before issue 14. */
  private refusal(raw: Record<string, unknown>, frame: ClientFrame): [string, string] | null {
    if (!this.faults.strictClientFrames) return null;
    if (frame.type === 'ack') return ['invalid_frame', 'type: unknown frame type "ack"'];
    const known = KNOWN_FRAME_FIELDS[frame.type]!;
    const extra = Object.keys(raw).filter((key) => !known.includes(key));
    return extra.length > 0 ? ['invalid_frame', `frame: unrecognized keys ${extra.join(', ')}`] : null;
  }

  private silencedReason(frame: ClientFrame): boolean {
    return (
      this.faults.silentCancelReason === true &&
      frame.type === 'cancel' &&
      frame.reason !== undefined &&
      !isCancelReason(frame.reason)
    );
  }

  /** Whether the session had this turn and it is over. */
  private ended(turnId: string): boolean {
    const { runtime, sessionId } = this.context;
    try {
      return runtime.currentTurn(sessionId)?.turnId !== turnId && runtime.sessions.hasTurn(sessionId, turnId);
    } catch {
      return false;
    }
  }
}

/** A client frame that parses and validates, with its raw object; null for any other. */
function validFrame(data: unknown): [Record<string, unknown>, ClientFrame] | null {
  let raw: unknown;
  try {
    raw = JSON.parse(String(data));
  } catch {
    return null;
  }
  if (depthOf(raw) > MAX_FRAME_DEPTH) return null;
  const frame = ClientFrameSchema.safeParse(raw);
  return frame.success ? [raw as Record<string, unknown>, frame.data] : null;
}
