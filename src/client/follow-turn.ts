import { type ClientFailure, MetisClient } from './client.js';
import { type ConversationState, initialState, reduce } from './reducer.js';

export interface FollowOptions {
  readonly url: string;
  /** Bearer token for a server that requires one. */
  readonly token?: string;
  readonly sessionId: string;
  readonly message: string;
  readonly model?: string;
  /** Stop following after this long (FollowTimeoutError); the turn goes on on the server. */
  readonly timeoutMs?: number;
  /**
   * Follow the next turn the server starts instead of submitting `message` (a message queued with
   * `multitask: enqueue`): its first `turn.started` after `since` names it.
   */
  readonly next?: boolean;
  /** Resume after this event id (the last of the turn before), so nothing of the next turn is missed. */
  readonly since?: string | null;
  /** Called once the server accepted the message, with the id of the turn it started. */
  readonly onSubmitted?: (turnId: string) => void;
  /** Called with each item and the state after it, to render. */
  readonly onItem?: (
    item: Parameters<typeof reduce>[1] | { kind: string },
    state: ConversationState,
    raw: unknown,
  ) => void;
}

/** The stream ended before the turn did; `failure` says why when the server refused the client. */
export class FollowTurnError extends Error {
  constructor(
    readonly failure: ClientFailure | null,
    message?: string,
  ) {
    super(message ?? failure?.message ?? 'the connection ended before the turn finished');
    this.name = 'FollowTurnError';
  }
}

/** `timeoutMs` passed before the turn ended; the turn (when submitted) goes on on the server. */
export class FollowTimeoutError extends Error {
  constructor(
    readonly turnId: string | null,
    readonly timeoutMs: number,
  ) {
    super(`stopped following after ${timeoutMs / 1000} s`);
    this.name = 'FollowTimeoutError';
  }
}

export interface FollowResult {
  readonly turnId: string;
  /**
   * `failed` when the turn completed without an answer: its last model call failed, or no model could
   * serve it (no model call at all). The wire has no failed status; this is what it shows.
   */
  readonly status: 'completed' | 'failed' | 'cancelled';
  readonly state: ConversationState;
}

/** How long a follower back from a drop waits for the end of a turn the server no longer runs. */
const LOST_END_GRACE_MS = 10_000;

/** The session's turn in flight, as the server reports it (`GET /sessions/{id}`). */
async function currentTurnOf(options: FollowOptions): Promise<string | null> {
  const response = await fetch(`${options.url}/sessions/${encodeURIComponent(options.sessionId)}`, {
    headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const body = (await response.json()) as { session?: { current_turn_id?: string | null } };
  return body.session?.current_turn_id ?? null;
}

/**
 * Attaches first (live, no snapshot), then submits the message, then follows the stream until that
 * turn completes or is cancelled: nothing of the turn can be missed between submit and attach.
 * @throws FollowTurnError when the stream ends first; the submit's own error when it is refused.
 */
export async function followTurn(
  options: FollowOptions & { render: (item: any, state: ConversationState) => void },
): Promise<FollowResult> {
  const client = new MetisClient({
    url: options.url,
    token: options.token,
    sessionId: options.sessionId,
    filter: 'preset:chat',
    snapshot: false,
    failFast: true,
    since: options.since ?? null,
  });
  let state = initialState;
  let turnId: string | null = null;
  let status: FollowResult['status'] | null = null;
  let lastCallFailed = false;
  let connects = 0;
  let lostTimer: NodeJS.Timeout | null = null;
  let lost = false;
  let timedOut = false;
  const deadline =
    options.timeoutMs === undefined
      ? null
      : setTimeout(() => {
          timedOut = true;
          client.close();
        }, options.timeoutMs).unref(); // the socket keeps the process alive; this never should
  for await (const item of client) {
    if (item.kind === 'status' && item.status === 'connected') connects += 1;
    if (item.kind === 'status' && item.status === 'connected' && connects > 1 && turnId !== null) {
      // Back after a drop or a restart. The replay from the cursor brings the turn's end; but when the
      // turn is over and its end never comes (the connection dropped before any event of it arrived,
      // so there is no cursor to replay from), waiting would last for ever.
      const current = await currentTurnOf(options).catch(() => undefined);
      if (current !== undefined && current !== turnId && lostTimer === null) {
        lostTimer = setTimeout(() => {
          lost = true;
          client.close();
        }, LOST_END_GRACE_MS);
      }
    }
    const frame =
      item.kind === 'frame'
        ? (item.frame as { type: string; event?: { type: string; turn_id?: unknown } })
        : null;
    if (options.next && turnId === null && frame?.event?.type === 'turn.started') {
      turnId = String(frame.event.turn_id);
      options.onSubmitted?.(turnId);
    }
    // Only its own turn: another client's next turn in the session (after a restart cut this one, say)
    // is not this turn's answer, and must neither be shown nor end the follow.
    if (isEventOfAnotherTurn(item, turnId, options.sessionId)) continue;
    if (item.kind === 'frame') state = reduce(state, item.frame);
    options.render(item, state);
    if (item.kind === 'status' && item.status === 'connected' && turnId === null && !options.next) {
      try {
        turnId = await client.submitTurn(options.message, options.model ? { model: options.model } : {});
        options.onSubmitted?.(turnId);
      } catch (error) {
        client.close();
        throw error;
      }
    }
    if (item.kind === 'frame' && item.frame.type === 'event' && turnId !== null) {
      const event = item.frame.event;
      if (event.turn_id === turnId && event.session_id === options.sessionId) {
        if (event.type === 'llm.call_failed') lastCallFailed = true;
        if (event.type === 'llm.call_completed') lastCallFailed = false;
        if (event.type === 'turn.completed') {
          // `signals_extra.failure`: a turn that failed outside a model call, or that a crash cut and
          // the next start closed (docs/decisions.md "Turns a crash cut").
          const failure = (event.payload.signals_extra as { failure?: unknown } | null)?.failure;
          status =
            lastCallFailed || event.payload.llm_call_count === 0 || typeof failure === 'string'
              ? 'failed'
              : 'completed';
        }
        if (event.type === 'turn.cancelled') status = 'cancelled';
      }
    }
    if (status !== null) {
      client.close();
      break;
    }
  }
  if (lostTimer !== null) clearTimeout(lostTimer);
  if (deadline !== null) clearTimeout(deadline);
  if (timedOut && status === null) throw new FollowTimeoutError(turnId, options.timeoutMs ?? 0);
  if (lost && status === null) {
    throw new FollowTurnError(
      null,
      `turn ${turnId} ended while the connection was down and its end was not received; ` +
        `see it with: metis tail ${options.sessionId}`,
    );
  }
  if (turnId === null || status === null) throw new FollowTurnError(client.failure);
  return { turnId, status, state };
}

/** An event frame that belongs to another turn than the one followed (all of them, before the submit). */
function isEventOfAnotherTurn(
  item: { kind: string; frame?: unknown },
  turnId: string | null,
  sessionId: string,
) {
  if (item.kind !== 'frame') return false;
  const frame = item.frame as { type: string; event?: { turn_id?: unknown; session_id?: unknown } };
  if (frame.type !== 'event' || frame.event === undefined) return false;
  return turnId === null || frame.event.turn_id !== turnId || frame.event.session_id !== sessionId;
}
