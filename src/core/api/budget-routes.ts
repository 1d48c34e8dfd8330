import { z } from 'zod';
import { jsonRoute, type Route } from '../http/routes.js';
import type { BudgetView } from '../runtime/budget.js';
import type { Runtime } from '../runtime/runtime.js';

/**
 * Caps to set (issue 31 budgets): a field left out keeps its value, null lifts the cap. `scope`:
 * `session` (default) caps the session's own spend, `tree` the spend of the session and every worker
 * under it.
 */
export const BudgetBody = z
  .strictObject({
    usd: z.number().nonnegative().nullable().optional(),
    tokens: z.number().int().nonnegative().nullable().optional(),
    scope: z.enum(['session', 'tree']).optional(),
  })
  .refine((b) => b.usd !== undefined || b.tokens !== undefined, {
    message: 'give usd, tokens or both',
    path: ['usd'],
  });

const Caps = z.object({ usd: z.number().nullable(), tokens: z.number().int().nullable() });
const Spend = { caps: Caps, spent_usd: z.number(), spent_tokens: z.number().int() };

export const BudgetAnswer = z.object({
  session_id: z.string(),
  session: z.object(Spend),
  tree: z.object({ root_session_id: z.string(), ...Spend }),
  paused: z
    .array(
      z.object({
        session_id: z.string(),
        turn_id: z.string(),
        scope: z.enum(['session', 'tree']),
        budget_session_id: z.string(),
        measure: z.enum(['usd', 'tokens']),
        spent: z.number(),
        cap: z.number(),
        paused_at: z.string(),
      }),
    )
    .describe('turns of the tree held before their next model call, with the cap that holds them'),
});

/** Sets the caps a request names on a session (POST /sessions, a turn's `budget`, POST .../budget). */
export function withBudget(
  runtime: Runtime,
  sessionId: string,
  body: z.output<typeof BudgetBody>,
): BudgetView {
  const caps = {
    ...(body.usd === undefined ? {} : { usd: body.usd }),
    ...(body.tokens === undefined ? {} : { tokens: body.tokens }),
  };
  return runtime.budgets.set(sessionId, body.scope === 'tree' ? { tree: caps } : { session: caps });
}

/** `GET` and `POST /sessions/{id}/budget`: see and raise the caps; a raise resumes the turns it frees. */
export function budgetRoutes(runtime: Runtime): Route[] {
  const answer = (sessionId: string, view: BudgetView) => ({ session_id: sessionId, ...view });
  return [
    jsonRoute(
      {
        method: 'GET',
        path: '/sessions/{session_id}/budget',
        summary: "The session's caps and spend, its delegation tree's, and the turns paused at a cap",
        placement: 'owner',
        success: { status: 200, description: 'session, tree, paused', schema: BudgetAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id] }) => {
        await runtime.describe(id!);
        return [200, answer(id!, runtime.budgets.view(id!))];
      },
    ),
    jsonRoute(
      {
        method: 'POST',
        path: '/sessions/{session_id}/budget',
        summary: 'Set or raise a cap (usd, tokens; scope session or tree): a paused turn goes on',
        body: BudgetBody,
        success: { status: 200, description: 'the budget as it is now', schema: BudgetAnswer },
        errors: ['METIS_ERR_SESSION_NOT_FOUND'],
      },
      async ({ params: [id], body }) => {
        await runtime.describe(id!);
        return [200, answer(id!, withBudget(runtime, id!, body))];
      },
    ),
  ];
}

/**
 * Ends a session's turn that waits at a budget (its own or a worker's under it): cancelled with
 * `user_cancel`, the user having ended the session rather than raise the cap. Resolves once it ended.
 */
export async function endPausedTurns(runtime: Runtime, sessionId: string): Promise<void> {
  const current = runtime.currentTurn(sessionId);
  if (current === null || runtime.budgets.view(sessionId).paused.length === 0) return;
  // The session ends: what was queued behind the turn must not start once it has ended.
  runtime.turnQueues.forget(sessionId);
  runtime.cancelTurn(sessionId, current.turnId, 'user_cancel');
  await current.done;
}
