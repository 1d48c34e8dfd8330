import type { OpenToolCalls, OpenTurn, OpenWork } from '../store/open-work.js';
import type { MessageRecord, SessionRecord, ToolCallRecord } from '../store/session-store.js';
import type { ArchivedStreamEvent, StoredTurnEvent } from './turn-resume-plan.js';

/** The events that end a call, a tool call or a delegation: their parent is what they end. */
export const ENDINGS = new Set([
  'llm.call_completed',
  'llm.call_failed',
  'tool.completed',
  'tool.failed',
  'delegate.completed',
  'delegate.failed',
]);

/** What a turn that resumes is planned from (turn-resume-plan.ts). */
export interface ResumeInputs {
  readonly messages: readonly MessageRecord[];
  /** The rows of the tool calls its messages and events name (null: no row). */
  readonly toolRows: ReadonlyMap<string, ToolCallRecord | null>;
  /** What its cut model call had streamed, from the stream archive. */
  readonly streamed: readonly ArchivedStreamEvent[];
}

/** One turn a stop left open, with everything closing or resuming it reads of the store. */
export interface PlannedTurn {
  readonly turn: OpenTurn;
  /** Its events, payloads parsed; empty when `readError` says why they could not be read. */
  readonly stored: readonly StoredTurnEvent[];
  readonly readError: unknown;
  /** The ids of what an event of the turn ended. */
  readonly ended: ReadonlySet<string | null>;
  /** Which restart this is for the turn (1 = the first), 0 when it is closed rather than resumed. */
  readonly resumption: number;
  /** Resumable, but past `max_resumptions`: closed with `resumption_cap_reached`. */
  readonly capped: boolean;
  /** What each worker of a delegation in flight cost, as its stored events say. */
  readonly workerCosts: ReadonlyMap<string, number>;
  /** Set when the turn resumes. */
  readonly resume: ResumeInputs | null;
}

/** A worker whose delegation a stop cut: what its `session.ended` reports. */
export interface CutWorker {
  readonly session: SessionRecord | null;
  readonly turnCount: number;
  readonly storedCost: number;
}

/** Everything recovery closes or resumes, read before any of it is written (crash-recovery.ts). */
export interface OpenWorkPlan {
  /** Workers' turns first: a worker's turn ends before the delegation of its planner's turn does. */
  readonly turns: readonly PlannedTurn[];
  readonly workers: ReadonlyMap<string, CutWorker>;
  /** Sessions in scope with tool-call rows still pending or running. */
  readonly openToolRows: readonly OpenToolCalls[];
  /**
   * The highest stored `seq` of every session closing the plan emits into (the turns' and the cut
   * workers'), so the bus numbers after them without a synchronous read of the store.
   */
  readonly lastSeqs: ReadonlyMap<string, number>;
}

export interface OpenWorkScope {
  /** Only these sessions and their workers (a session taken over from a dead node); default every one. */
  readonly sessions?: readonly string[];
  /** `runtime.on_restart` (default `fail`: every cut turn is closed as failed). */
  readonly onRestart?: 'resume' | 'fail';
  /** `runtime.max_resumptions`. */
  readonly maxResumptions?: number;
}

/**
 * Reads what a stop left open (docs/decisions.md "Turns a crash cut"): the open turns in scope, their
 * events, and what closing or resuming each will report. Nothing is written: the plan is closed in one
 * synchronous pass afterwards, so the store may answer these reads over the network.
 */
export async function readOpenWork(open: OpenWork, scope: OpenWorkScope = {}): Promise<OpenWorkPlan> {
  const only = scope.sessions === undefined ? null : new Set(scope.sessions);
  /** Whether a session is one recovery was asked for, or a worker of one. */
  const inScope = (row: { session_id: string; parent_session_id: string | null }) =>
    only === null ||
    only.has(row.session_id) ||
    (row.parent_session_id !== null && only.has(row.parent_session_id));
  const openTurns = (await open.openTurns()).filter(inScope);
  const ordered = [
    ...openTurns.filter((t) => t.parent_session_id !== null),
    ...openTurns.filter((t) => t.parent_session_id === null),
  ];
  const resume = scope.onRestart === 'resume';
  const maxResumptions = scope.maxResumptions ?? 3;
  const turns: PlannedTurn[] = [];
  const workers = new Map<string, CutWorker>();
  for (const turn of ordered) {
    const planned = await readTurn(open, turn, resume, maxResumptions);
    turns.push(planned);
    for (const workerId of planned.workerCosts.keys()) {
      if (workers.has(workerId)) continue;
      const [session, turnCount, storedCost] = await Promise.all([
        open.session(workerId),
        open.turnCount(workerId),
        open.storedCost(workerId),
      ]);
      workers.set(workerId, { session, turnCount, storedCost });
    }
  }
  const openToolRows = (await open.sessionsWithOpenToolCalls()).filter(inScope);
  const lastSeqs = new Map<string, number>();
  for (const sessionId of new Set([...turns.map((planned) => planned.turn.session_id), ...workers.keys()]))
    lastSeqs.set(sessionId, await open.lastSeq(sessionId));
  return { turns, workers, openToolRows, lastSeqs };
}

async function readTurn(
  open: OpenWork,
  turn: OpenTurn,
  resume: boolean,
  maxResumptions: number,
): Promise<PlannedTurn> {
  let stored: StoredTurnEvent[];
  try {
    stored = (await open.turnEvents(turn.turn_id))
      .filter((row) => row.type !== 'bus.gap_detected')
      .map(({ payload_json, ...row }) => ({
        ...row,
        payload: JSON.parse(payload_json) as Record<string, any>,
      }));
  } catch (error) {
    // One turn that cannot be read must not stop the start: it is logged and left as it is.
    return {
      turn,
      stored: [],
      readError: error,
      ended: new Set(),
      resumption: 0,
      capped: false,
      workerCosts: new Map(),
      resume: null,
    };
  }
  const ended = new Set(stored.filter((e) => ENDINGS.has(e.type)).map((e) => e.parent_event_id));
  // Workers are not resumed: their delegation ends failed and the planner's turn goes on. An ended
  // session takes nothing up (and would count no resumption): its turn is closed.
  const resumable =
    resume && turn.parent_session_id === null && (await open.session(turn.session_id))?.status !== 'ended';
  const resumption = resumable ? (await open.resumedSince(turn.session_id, turn.id)) + 1 : 0;
  const capped = resumption > maxResumptions;
  const workerCosts = new Map<string, number>();
  for (const e of stored) {
    if (e.type !== 'delegate.started' || ended.has(e.id)) continue;
    const workerId = String(e.payload.worker_session_id);
    workerCosts.set(workerId, await open.storedCost(workerId));
  }
  return {
    turn,
    stored,
    readError: null,
    ended,
    resumption,
    capped,
    workerCosts,
    resume: resumption > 0 && !capped ? await resumeInputs(open, turn, stored, ended) : null,
  };
}

async function resumeInputs(
  open: OpenWork,
  turn: OpenTurn,
  stored: readonly StoredTurnEvent[],
  ended: ReadonlySet<string | null>,
): Promise<ResumeInputs> {
  const messages = await open.turnMessages(turn.session_id, turn.turn_id);
  const toolUseIds = new Set<string>();
  for (const e of stored) if (e.type === 'tool.called') toolUseIds.add(String(e.payload.tool_use_id));
  for (const message of messages)
    for (const block of message.content as { type?: string; id?: string }[])
      if (block.type === 'tool_use' && typeof block.id === 'string') toolUseIds.add(block.id);
  const toolRows = new Map<string, ToolCallRecord | null>();
  for (const id of toolUseIds) toolRows.set(id, await open.toolCall(id, turn.session_id));
  return { messages, toolRows, streamed: await cutStream(open, turn, stored, ended) };
}

/** The streaming events archived after the turn's open model call: the message it was streaming. */
async function cutStream(
  open: OpenWork,
  turn: OpenTurn,
  stored: readonly StoredTurnEvent[],
  ended: ReadonlySet<string | null>,
): Promise<ArchivedStreamEvent[]> {
  const call = stored.filter((e) => e.type === 'llm.call_started' && !ended.has(e.id)).at(-1);
  if (call === undefined) return [];
  return (await open.archivedAfter(turn.session_id, call.id, 20_000))
    .map((json) => JSON.parse(json) as ArchivedStreamEvent & { turn_id: string | null })
    .filter((e) => e.turn_id === turn.turn_id);
}
