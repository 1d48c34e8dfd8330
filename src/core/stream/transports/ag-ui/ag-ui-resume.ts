import { MetisError } from '../../../errors.js';
import { HttpError } from '../../../http/http-util.js';
import type { Runtime } from '../../../runtime/runtime.js';
import type { BatchCall } from './ag-ui-events.js';
import { type AgUiInput, toolResultsOf } from './ag-ui-input.js';

/** A run that continues the thread's turn in flight with what the client brought for it. */
export interface Continuation {
  readonly turnId: string;
  /** Hands the answers to the turn; called once the run's stream is attached, so nothing is missed. */
  readonly answer: () => void;
  /** Frontend tool calls whose results this run brought. */
  readonly answered: ReadonlySet<string>;
  /** The calls of the model message the turn is running, as they stand. */
  readonly batch: BatchCall[];
  /** Names of the turn's frontend tools. */
  readonly clientTools: ReadonlySet<string>;
}

interface StoredToolUse {
  readonly type: string;
  readonly id?: string;
  readonly name?: string;
}

/**
 * What a run does for a thread whose turn is in flight: null when the turn is not waiting for the
 * client, or the run brought nothing for it (the caller then treats the run as a new one). A run that
 * brings answers continues the turn: `resume` answers the approvals it waits for (AG-UI interrupts: every
 * open one, docs/ag-ui.md "Approvals"), tool messages answer the calls of its frontend tools.
 * @throws HttpError 409 METIS_ERR_TURN_IN_FLIGHT when the turn waits for answers the run does not bring,
 *   400 for a resume payload that is not an approval's answer.
 */
export function continuationOf(runtime: Runtime, sessionId: string, input: AgUiInput): Continuation | null {
  const turn = runtime.currentTurn(sessionId);
  if (turn === null) return null;
  const clientTools = runtime.clientToolResults.clientToolNames(sessionId);
  const approvals = runtime.pendingConfirmations(sessionId);
  const waiting = runtime.clientToolResults.waitingIn(sessionId);
  const batch = runningBatch(runtime, sessionId, clientTools, [
    ...waiting,
    ...approvals.map((request) => request.tool_use_id),
  ]);
  const results = toolResultsOf(input.messages);
  const delivered = batch.filter((call) => call.client && !call.done && results.has(call.id));
  const resume = input.resume ?? [];
  if (resume.length === 0 && delivered.length === 0) {
    if (approvals.length === 0 && waiting.length === 0) return null;
    throw new HttpError(
      409,
      'METIS_ERR_TURN_IN_FLIGHT',
      `thread ${sessionId} waits for ${approvals.length > 0 ? `the approval of ${approvals.map((a) => `${a.tool_name} (interrupt ${a.confirmation_request_id})`).join(', ')}: answer it with resume` : `the result of ${waiting.join(', ')}: send its tool message`}`,
    );
  }
  const decisions = approvals.map((request) => {
    const entry = resume.find((r) => r.interruptId === request.confirmation_request_id);
    if (entry === undefined)
      throw new HttpError(
        409,
        'METIS_ERR_TURN_IN_FLIGHT',
        `resume: answer every open interrupt; ${request.confirmation_request_id} (${request.tool_name}) has no entry`,
      );
    return { request, ...decisionOf(entry) };
  });
  const missing = waiting.filter((id) => !results.has(id));
  if (missing.length > 0 && decisions.length === 0)
    throw new HttpError(
      409,
      'METIS_ERR_TURN_IN_FLIGHT',
      `messages: the turn waits for the result of ${missing.join(', ')}; send a tool message for each`,
    );
  return {
    turnId: turn.turnId,
    answered: new Set(delivered.map((call) => call.id)),
    batch,
    clientTools,
    answer: () => {
      for (const call of delivered)
        runtime.clientToolResults.deliver(sessionId, call.id, results.get(call.id)!);
      for (const { request, decision, scope } of decisions) {
        try {
          runtime.confirm(sessionId, request.confirmation_request_id, decision, scope);
        } catch (error) {
          // Decided meanwhile (the confirmation route, a timeout): the run follows what comes next.
          if (!(error instanceof MetisError && error.code === 'METIS_ERR_CONFIRMATION_NOT_FOUND'))
            throw error;
        }
      }
    },
  };
}

/** A resume entry as a confirmation's decision: `{approved}` (and a scope); cancelled denies. */
function decisionOf(entry: NonNullable<AgUiInput['resume']>[number]): {
  decision: 'allow' | 'deny';
  scope: 'once' | 'session';
} {
  if (entry.status === 'cancelled') return { decision: 'deny', scope: 'once' };
  const payload = entry.payload as { approved?: unknown; scope?: unknown } | undefined;
  if (
    typeof payload?.approved !== 'boolean' ||
    (payload.scope !== undefined && payload.scope !== 'once' && payload.scope !== 'session')
  )
    throw new HttpError(
      400,
      'METIS_ERR_INVALID_ARGUMENT',
      `resume: interrupt ${entry.interruptId} is answered with {"approved": true | false, "scope"?: "once" | "session"}`,
    );
  return {
    decision: payload.approved ? 'allow' : 'deny',
    scope: payload.scope === 'session' ? 'session' : 'once',
  };
}

/**
 * The tool calls of the newest model message, in order: those before the one the turn waits on are
 * done (the dispatcher runs them one at a time). Without a call of its own waiting (a worker's
 * approval) none is known to be done.
 */
function runningBatch(
  runtime: Runtime,
  sessionId: string,
  clientTools: ReadonlySet<string>,
  waitingIds: readonly string[],
): BatchCall[] {
  const newest = runtime.sessions
    .messages(sessionId, { limit: 5 })
    .filter((m) => m.role === 'assistant')
    .at(-1);
  const uses = ((newest?.content ?? []) as StoredToolUse[]).filter((b) => b.type === 'tool_use');
  const waitingAt = uses.findIndex((use) => waitingIds.includes(use.id ?? ''));
  return uses.map((use, index) => ({
    id: use.id ?? '',
    client: clientTools.has(use.name ?? ''),
    done: waitingAt !== -1 && index < waitingAt,
  }));
}
