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
