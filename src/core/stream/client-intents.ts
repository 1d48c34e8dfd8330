import { isMetisError } from '../errors.js';
import { CANCEL_REASONS, type CancelReason, isCancelReason } from '../runtime/turn-state.js';
import {
  ClientFrameSchema,
  depthOf,
  describeFrameIssue,
  MAX_FRAME_DEPTH,
  type SubscribeFrame,
} from './client-frames.js';
import type { ConnectionDeps } from './connection-deps.js';

/** What a client's frames act on: its connection (client-connection.ts). */
export interface IntentTarget {
  readonly sessionId: string;
  /** Whether the connection still waits for its subscribe. */
  awaitingSubscribe(): boolean;
  subscribe(frame: SubscribeFrame): void;
  subscribeError(code: string, message: string): void;
  sendError(code: string, message: string): void;
  /** Answers a client's ping (§3.8). */
  pong(nonce: string): void;
  /** A pong came back with this nonce: alive if it answers one of the server's pings. */
  ponged(nonce: string): void;
  /** A binary frame: not part of the protocol, the connection closes. */
  refuseBinary(): void;
}

/**
 * One frame from the client (streaming §4.3): parsed, checked (size, depth, schema; unknown fields are
 * ignored, docs/decisions.md "Client frames") and acted on. A bad frame gets an `error` frame naming
 * the field and changes nothing; a bad subscribe gets `subscribe_error`.
 */
export function readClientFrame(
  target: IntentTarget,
  deps: Pick<ConnectionDeps, 'runtime' | 'runElsewhere'>,
  data: unknown,
  isBinary: boolean,
): void {
  if (isBinary) {
    target.refuseBinary();
    return;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(String(data));
  } catch {
    target.sendError('invalid_json', 'frame is not valid JSON');
    return;
  }
  if (depthOf(parsed) > MAX_FRAME_DEPTH) {
    target.sendError('invalid_frame', `frame nests deeper than ${MAX_FRAME_DEPTH}`);
    return;
  }
  const frame = ClientFrameSchema.safeParse(parsed);
  if (!frame.success) {
    const problem = describeFrameIssue(frame.error.issues);
    // A subscribe is answered with subscribe_ack or subscribe_error (§3.2), and a bad filter is
    // `invalid_filter` (§4.2) whether it names an unknown type or has the wrong shape.
    const badFilter =
      target.awaitingSubscribe() &&
      typeof parsed === 'object' &&
      (parsed as { type?: unknown } | null)?.type === 'subscribe' &&
      frame.error.issues[0]?.path[0] === 'filter';
    if (badFilter) target.subscribeError('invalid_filter', problem);
    else target.sendError('invalid_frame', problem);
    return;
  }
  const value = frame.data;
  switch (value.type) {
    case 'subscribe':
      target.subscribe(value);
      return;
    case 'cancel':
      cancel(target, deps, value.turn_id, value.reason);
      return;
    case 'ping':
      target.pong(value.nonce);
      return;
    case 'pong':
      // Only an answer to a ping of ours proves the client is alive: its nonce must match (§3.8).
      target.ponged(value.nonce);
      return;
    case 'ack':
      // §2.2's client acknowledgement: accepted, and nothing to do (docs/decisions.md "Client frames").
      return;
  }
}

/**
 * The `cancel` frame. A reason outside the catalog's `turn.cancelled.reason` enum cannot be
 * "propagated to turn.cancelled.payload.reason" (§4.3), so the cancel is refused with the allowed
 * values and the turn goes on (docs/decisions.md "The cancel reason"). A turn already cancelling or
 * ended is a no-op with no frame (§6.5); only a turn the session never had is `turn_not_found`.
 */
function cancel(
  target: IntentTarget,
  deps: Pick<ConnectionDeps, 'runtime' | 'runElsewhere'>,
  turnId: string,
  reason: string | undefined,
): void {
  if (reason !== undefined && !isCancelReason(reason)) {
    target.sendError(
      'invalid_frame',
      `reason: must be one of ${CANCEL_REASONS.join(', ')} (or absent, meaning user_cancel); ` +
        `turn ${turnId} was not cancelled`,
    );
    return;
  }
  const cancelReason = isCancelReason(reason) ? reason : 'user_cancel';
  const elsewhere = deps.runElsewhere;
  if (elsewhere !== undefined) {
    const url = `/sessions/${encodeURIComponent(target.sessionId)}/turns/${encodeURIComponent(turnId)}/cancel`;
    void elsewhere(target.sessionId, { method: 'POST', url, body: { reason: cancelReason } }).then(
      (answer) => {
        if (answer === null) cancelHere(target, deps, turnId, cancelReason);
        else if (answer.status === 404) target.sendError('turn_not_found', errorMessageOf(answer.body));
        // Not run (the node running the session did not answer, or refused): the client must know
        // its cancel did not go through.
        else if (answer.status >= 300) target.sendError('cancel_failed', errorMessageOf(answer.body));
      },
      (error: unknown) => target.sendError('cancel_failed', (error as Error).message),
    );
    return;
  }
  cancelHere(target, deps, turnId, cancelReason);
}

function cancelHere(
  target: IntentTarget,
  deps: Pick<ConnectionDeps, 'runtime'>,
  turnId: string,
  cancelReason: CancelReason,
): void {
  try {
    deps.runtime.cancelTurn(target.sessionId, turnId, cancelReason);
  } catch (error) {
    if (isMetisError(error)) {
      target.sendError('turn_not_found', error.message);
      return;
    }
    // A client's frame must never end the process: what went wrong is the client's answer.
    target.sendError('cancel_failed', (error as Error).message);
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
