import { microsToIso } from '../events/clock.js';
import type { MetisEvent } from '../events/envelope.js';
import { storedBudgetView } from '../runtime/budget.js';
import type { Runtime } from '../runtime/runtime.js';
import type { StreamReads } from '../store/stream-reads.js';
import { type FaultSwitches, NO_FAULTS } from './faults.js';
import type { RecentStreams } from './recent-streams.js';

export const SNAPSHOT_MESSAGE_LIMIT = 50;

/** A tool call waiting for the user's decision, as the snapshot lists it. */
export interface PendingConfirmation {
  /** The session whose tool waits: the attached one, or one of its workers (docs/decisions.md). */
  readonly session_id: string;
  readonly confirmation_request_id: string;
  readonly tool_use_id: string;
  readonly tool_name: string;
  readonly side_effects: string;
  /** `command_summary` when the tool has one, else `input_summary`. */
  readonly summary: string;
  readonly turn_id: string | null;
  /** The `tool.confirmation_requested` event, and when it was emitted. */
  readonly requested_event_id: string;
  readonly requested_at: string;
  readonly expires_at: string | null;
}

/**
 * The snapshot frame (streaming §3.4) as of `snapshotAt` (see snapshot-point.ts): the session summary
 * with cost and turn state, the last 50 messages, and `snapshot_at_event_id`, all reflecting exactly
 * the events up to that id, read from the store rather than from the runtime's live state, which runs
 * ahead of what clients were sent (issue 14 obs. 1). The point is chosen so that nothing is in
 * progress at it; when something still is (a replay too large to follow the snapshot), its streamed
 * events ride along in `in_flight_events` and the pending questions in `pending_confirmations`
 * (additive fields clients may ignore; `pending_confirmations` only when there is one). `queue` lists
 * the messages waiting while a turn runs (multitask; only when one waits), and `budget`, when the
 * session has a cap, its spend and the turns paused at a cap.
 */
export async function buildSnapshot(
  runtime: Runtime,
  reads: StreamReads,
  recent: RecentStreams,
  sessionId: string,
  snapshotAt: string | null,
  faults: FaultSwitches = NO_FAULTS,
): Promise<string> {
  const live = snapshotAt === null || faults.snapshotLiveState;
  // Taken before the reads: what the runtime knows now, not after them.
  const counted = runtime.costs.counted(sessionId);
  const [asOf, messages, pending] = await Promise.all([
    live ? null : reads.sessionAsOf(sessionId, snapshotAt, counted),
    live
      ? runtime.sessions.messages(sessionId, { limit: SNAPSHOT_MESSAGE_LIMIT })
      : reads.messagesAsOf(sessionId, snapshotAt, SNAPSHOT_MESSAGE_LIMIT),
    pendingConfirmations(runtime, reads, sessionId, snapshotAt),
  ]);
  // The runtime's own fields (model, status, queue, budget) as they are once the reads are answered.
  const info = await runtime.describe(sessionId);
  // Of a session another node runs, as the store holds it.
  const budget = runtime.runsElsewhere(sessionId)
    ? storedBudgetView(await reads.storedBudget(sessionId), runtime.config.budgets)
    : runtime.budgets.hasCaps(sessionId)
      ? runtime.budgets.view(sessionId)
      : null;
  const summary = asOf ?? {
    turnCount: info.turn_count,
    currentTurnId: info.current_turn_id,
    costUsd: info.cost_so_far_usd,
  };
  const inFlight: MetisEvent[] =
    summary.currentTurnId === null
      ? []
      : recent.inFlight(sessionId).filter((e) => snapshotAt === null || e.id <= snapshotAt);
  const queue = runtime.turnQueues.list(sessionId);
  return JSON.stringify({
    type: 'snapshot',
    session: {
      id: info.id,
      workspace_path: info.workspace_path,
      active_model: info.active_model,
      routing_policy_version: info.routing_policy_version,
      cost_so_far_usd: summary.costUsd,
      turn_count: summary.turnCount,
      current_turn_id: summary.currentTurnId,
      current_turn_status: summary.currentTurnId === null ? null : 'in_flight',
      parent_session_id: info.parent_session_id,
      status: info.status,
    },
    messages,
    snapshot_at_event_id: snapshotAt,
    in_flight_events: inFlight,
    ...(pending.length > 0 ? { pending_confirmations: pending } : {}),
    // Held in memory, not in the store: as they are now, not as of the snapshot point (issue 31).
    ...(queue.length > 0 ? { queue } : {}),
    ...(budget === null ? {} : { budget }),
  });
}

/** The fields of `tool.confirmation_requested` read here (`tool.confirmation_resolved` has the id too). */
interface RequestedPayload {
  readonly confirmation_request_id: string;
  readonly tool_use_id: string;
  readonly tool_name: string;
  readonly side_effects: string;
  readonly input_summary: string;
  readonly command_summary?: string | null;
  readonly expires_at?: string | null;
}

/**
 * Confirmations pending as of `snapshotAt`: requested by an event the snapshot covers, not resolved by
 * one, and still waiting in the broker now (a cancelled turn settles its requests without a
 * `tool.confirmation_resolved`; a restarted server forgot them). One requested after `snapshotAt`
 * reaches the client live instead, as its `tool.confirmation_requested` event.
 */
export async function pendingConfirmations(
  runtime: Runtime,
  reads: Pick<StreamReads, 'confirmationEventsThrough' | 'unansweredConfirmations' | 'lineage'>,
  sessionId: string,
  snapshotAt: string | null,
): Promise<PendingConfirmation[]> {
  // A worker's question is the planner's too: its clients are who can answer it (a §7.1 exception).
  // Of a session another node runs, as the store holds them.
  const requests = runtime.runsElsewhere(sessionId)
    ? await reads.unansweredConfirmations((await reads.lineage(sessionId)).map((row) => row.id))
    : runtime.pendingConfirmations(sessionId);
  const waiting = new Set(requests.map((r) => r.confirmation_request_id));
  if (waiting.size === 0 || snapshotAt === null) return [];
  const sessionIds = [...new Set(requests.map((r) => r.session_id))];
  const rows = await reads.confirmationEventsThrough(sessionIds, snapshotAt);
  const pending = new Map<string, PendingConfirmation>();
  for (const {
    id,
    session_id: owner,
    timestamp_us: timestampUs,
    turn_id: turnId,
    type,
    payload_json: payloadJson,
  } of rows) {
    const p = JSON.parse(payloadJson) as RequestedPayload;
    const requestId = p.confirmation_request_id;
    if (!waiting.has(requestId)) continue;
    if (type === 'tool.confirmation_resolved') {
      pending.delete(requestId);
      continue;
    }
    pending.set(requestId, {
      session_id: owner,
      confirmation_request_id: requestId,
      tool_use_id: p.tool_use_id,
      tool_name: p.tool_name,
      side_effects: p.side_effects,
      summary: p.command_summary ?? p.input_summary,
      turn_id: turnId,
      requested_event_id: id,
      requested_at: microsToIso(timestampUs),
      expires_at: p.expires_at ?? null,
    });
  }
  return [...pending.values()];
}
