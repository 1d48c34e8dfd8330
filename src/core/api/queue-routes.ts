import { z } from 'zod';
import { MetisError } from '../errors.js';
import { jsonRoute, type Route } from '../http/routes.js';
import type { Runtime } from '../runtime/runtime.js';
import { MULTITASK_STRATEGIES, type Multitask, type StartedTurn } from '../runtime/turn-queue.js';
import type { StoreContext } from '../store/store-context.js';
import { assertStorageWritable, emittedDuring, untilCommitted } from '../stream/commit-ack.js';
import { BudgetBody, budgetRoutes, withBudget } from './budget-routes.js';

const modelId = z.string().regex(/^[a-z0-9-]+:\S+$/, 'must be "provider:name", e.g. scripted:demo');

/** `POST /sessions/{session_id}/turns`. */
export const SubmitTurnBody = z.strictObject({
  message: z.string().min(1).max(200_000),
  model: modelId.optional(),
  multitask: z
    .enum(MULTITASK_STRATEGIES)
    .optional()
    .describe('what to do when a turn runs: reject (409, the default), enqueue, interrupt or steer'),
  budget: BudgetBody.optional().describe("caps set on the session before the turn (as POST .../budget's)"),
});

const QueuedMessageAnswer = z.object({
  queued_id: z.string(),
  mode: z.enum(['enqueue', 'interrupt', 'steer']),
  message: z.string(),
  model: z.string().nullable(),
  queued_at: z.string(),
  position: z.number().int().describe('1: the next turn; 0: a steer for the running turn (turn_id)'),
  turn_id: z.string().nullable(),
});

export const QueueAnswer = z.object({ queue: z.array(QueuedMessageAnswer) });

export const SubmittedAnswer = z.object({
  turn_id: z.string().optional().describe('started: the new turn; steered: the running turn'),
  status: z
    .enum(['started', 'queued', 'steered'])
    .optional()
    .describe('with multitask only (without it the answer is {turn_id}, as before issue 31)'),
  queued_id: z.string().optional().describe('queued, steered: drop it with DELETE .../queue/{queued_id}'),
  position: z.number().int().positive().optional().describe('queued: 1 is the next turn'),
  interrupted_turn_id: z.string().optional().describe('interrupt: the turn it cancelled'),
});

type Answer = z.output<typeof SubmittedAnswer>;

/**
 * A turn submitted with a multitask strategy (docs/http-api.md "Input while a turn runs"). A turn that
 * starts is acknowledged once its `turn.started` is stored, as before; an interrupt answers once the
 * cancelled turn has ended and the new one has started.
 */
export async function submitTurn(
  runtime: Runtime,
  trace: StoreContext,
  sessionId: string,
  body: z.output<typeof SubmitTurnBody>,
  commitWaitMs?: number,
): Promise<[202, Answer]> {
  assertStorageWritable(trace);
  if (body.budget !== undefined) {
    await runtime.describe(sessionId);
    withBudget(runtime, sessionId, body.budget);
  }
  const multitask: Multitask = body.multitask ?? 'reject';
  const { result: submitted, event } = emittedDuring(
    trace,
    (e) => e.type === 'turn.started' && e.session_id === sessionId,
    () => runtime.turnQueues.submit(sessionId, body.message, body.model ?? null, multitask),
  );
  switch (submitted.status) {
    case 'queued':
      return [202, { status: 'queued', queued_id: submitted.queuedId, position: submitted.position }];
    case 'steered':
      return [202, { status: 'steered', queued_id: submitted.queuedId, turn_id: submitted.turnId }];
    case 'started':
      await acknowledged(runtime, trace, sessionId, submitted.turn, event, commitWaitMs);
      return [
        202,
        body.multitask === undefined
          ? { turn_id: submitted.turn.turnId }
          : { status: 'started', turn_id: submitted.turn.turnId },
      ];
    case 'interrupting': {
      const { result: turn, event: started } = await startedDuring(trace, sessionId, submitted.started);
      await acknowledged(runtime, trace, sessionId, turn, started, commitWaitMs);
      return [
        202,
        { status: 'started', turn_id: turn.turnId, interrupted_turn_id: submitted.interruptedTurnId },
      ];
    }
  }
}

/** The turn started by a queue entry, with its `turn.started` (emitted when the entry is taken). */
async function startedDuring(trace: StoreContext, sessionId: string, started: Promise<StartedTurn>) {
  let found: Parameters<Parameters<StoreContext['bus']['onEmit']>[0]>[0] | null = null;
  const stop = trace.bus.onEmit((e) => {
    if (found === null && e.type === 'turn.started' && e.session_id === sessionId) found = e;
  });
  try {
    const result = await started;
    return { result, event: found };
  } finally {
    stop();
  }
}

async function acknowledged(
  runtime: Runtime,
  trace: StoreContext,
  sessionId: string,
  turn: StartedTurn,
  event: Parameters<typeof untilCommitted>[1],
  commitWaitMs?: number,
): Promise<void> {
  try {
    await untilCommitted(trace, event, commitWaitMs);
  } catch (error) {
    // Not acknowledged, so not run: the turn ends as cancelled once storage takes its events.
    if (runtime.currentTurn(sessionId)?.turnId === turn.turnId)
      runtime.cancelTurn(sessionId, turn.turnId, 'timeout');
    throw error;
  }
}

/** `GET /sessions/{id}/queue`, the DELETE of `/sessions/{id}/queue/{queued_id}`, and the budget routes. */
export function queueRoutes(runtime: Runtime): Route[] {
  return [
    ...budgetRoutes(runtime),
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}/queue',
        summary: 'Messages waiting while a turn runs: steers for it, then the turns to come',
        // The queue lives in the memory of the node running the session.
        placement: 'owner',
        success: { status: 200, description: 'queue, next first', schema: QueueAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id] }) => {
        await runtime.describe(id!);
        return [200, { queue: runtime.turnQueues.list(id!) }];
      },
    ),
    jsonRoute(
      {
        method: 'DELETE',
        path: '/sessions/{session_id}/queue/{queued_id}',
        summary: 'Drop a queued message (or a steer the running turn has not taken yet)',
        success: { status: 200, description: 'the queue left', schema: QueueAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND', 'METIS_ERR_TURN_NOT_FOUND'],
      },
      async ({ params: [id, queuedId] }) => {
        await runtime.describe(id!);
        if (!runtime.turnQueues.drop(id!, queuedId!))
          throw new MetisError(
            'METIS_ERR_TURN_NOT_FOUND',
            `session ${id} has no queued message ${queuedId} (started, taken or dropped already)`,
          );
        return [200, { queue: runtime.turnQueues.list(id!) }];
      },
    ),
  ];
}
