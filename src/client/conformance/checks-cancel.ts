import type { Check } from './checks-stream.js';
import { type CheckContext, expectEqual, expectTrue, sleep, turnShape } from './context.js';

/** How long after `tool.called` a tool is surely running: the server's seam pause plus margin. */
const TOOL_RUNNING_AFTER_MS = 700;

function tail(shape: readonly string[], n: number): string[] {
  return shape.slice(-n);
}

/**
 * The turn's shape without `tool.confirmation_*`: a server whose policy asks before running a tool
 * (metis's default asks for shell) puts them between `tool.called` and the tool's end, and the
 * cancellation sequences of §6.2 do not depend on them.
 */
function toolShape(events: Parameters<typeof turnShape>[0], turn: string): string[] {
  return turnShape(events, turn).filter((type) => !type.startsWith('tool.confirmation_'));
}

/** Answers the turn's tool confirmation request with allow, as a user would; false if none was asked. */
async function allowIfAsked(
  ctx: CheckContext,
  session: string,
  turn: string,
  client: Awaited<ReturnType<CheckContext['attach']>>,
): Promise<boolean> {
  const request = client
    .events()
    .find((e) => e.type === 'tool.confirmation_requested' && e.turn_id === turn && e.session_id === session);
  if (request === undefined) return false;
  const id = request.payload.confirmation_request_id as string;
  const answer = await ctx.api('POST', `/sessions/${session}/confirmations/${id}`, { decision: 'allow' });
  expectEqual(`POST /sessions/${session}/confirmations/${id} answers 200`, 200, answer.status);
  return true;
}

async function cancelled(
  ctx: CheckContext,
  message: string,
  cancelWhen: (
    session: string,
    turn: string,
    client: Awaited<ReturnType<CheckContext['attach']>>,
  ) => Promise<void>,
) {
  const session = await ctx.newSession();
  const client = await ctx.attach(session);
  const turn = await ctx.submit(session, message);
  await cancelWhen(session, turn, client);
  client.send({ type: 'cancel', turn_id: turn, reason: 'user_cancel' });
  await ctx.turnEnd(client, turn);
  await sleep(100); // anything emitted after turn.cancelled would be a bug too
  return {
    session,
    turn,
    client,
    events: client.events().filter((e) => e.turn_id === turn && e.session_id === session),
  };
}

export const cancelChecks: Check[] = [
  {
    name: 'cancel_mid_llm',
    sse: true,
    covers: '§11.1 test 7, §6.2.1',
    async run(ctx) {
      const { events, turn } = await cancelled(ctx, 'slow: cancel me', async (_s, t, client) => {
        await ctx.eventOf(client, 'text.delta', (e) => e.turn_id === t);
      });
      expectEqual(
        'cancel mid-stream ends with message.complete, llm.call_failed, turn.cancelled',
        ['message.complete', 'llm.call_failed', 'turn.cancelled'],
        tail(turnShape(events, turn), 3),
      );
      const complete = events.find((e) => e.type === 'message.complete');
      expectEqual('message.complete.stop_reason', 'cancelled', complete?.payload.stop_reason);
      expectEqual(
        'llm.call_failed.error_class',
        'cancelled',
        events.find((e) => e.type === 'llm.call_failed')?.payload.error_class,
      );
      expectEqual(
        'no tool.failed when no tool ran',
        [],
        events.filter((e) => e.type === 'tool.failed').map((e) => e.id),
      );
      return undefined;
    },
  },
  {
    name: 'cancel_mid_tool',
    sse: true,
    covers: '§11.1 test 8, §6.2.2',
    async run(ctx) {
      const { events, turn } = await cancelled(ctx, 'run: sleep 30', async (s, t, client) => {
        await ctx.eventOf(client, 'tool.called', (e) => e.turn_id === t);
        await sleep(TOOL_RUNNING_AFTER_MS);
        if (await allowIfAsked(ctx, s, t, client)) await sleep(TOOL_RUNNING_AFTER_MS);
      });
      expectEqual(
        'cancel during a tool ends with tool.failed then turn.cancelled',
        ['llm.call_completed', 'tool.called', 'tool.failed', 'turn.cancelled'],
        tail(toolShape(events, turn), 4),
      );
      expectEqual(
        'tool.failed.error_class',
        'cancelled',
        events.find((e) => e.type === 'tool.failed')?.payload.error_class,
      );
      expectEqual(
        'no llm.call_failed after a completed call',
        0,
        events.filter((e) => e.type === 'llm.call_failed').length,
      );
      expectEqual(
        'message.complete is not sent again',
        1,
        events.filter((e) => e.type === 'message.complete').length,
      );
      return undefined;
    },
  },
  {
    name: 'cancel_at_seam',
    sse: true,
    covers: '§11.1 test 8b, §6.2.3',
    async run(ctx) {
      const { events, turn } = await cancelled(ctx, 'run: sleep 30', async (_s, t, client) => {
        await ctx.eventOf(client, 'tool.called', (e) => e.turn_id === t);
      });
      expectEqual(
        'cancel before the tool runs fails it as cancelled, then turn.cancelled',
        ['llm.call_completed', 'tool.called', 'tool.failed', 'turn.cancelled'],
        tail(toolShape(events, turn), 4),
      );
      expectEqual(
        'tool.failed.error_class',
        'cancelled',
        events.find((e) => e.type === 'tool.failed')?.payload.error_class,
      );
      return undefined;
    },
  },
  {
    name: 'cancel_during_delegation',
    sse: true,
    covers: '§11.1 test 9, §6.4',
    async run(ctx) {
      const { events, turn } = await cancelled(
        ctx,
        'delegate: slow: a long survey',
        async (_s, t, client) => {
          await ctx.eventOf(client, 'delegate.started', (e) => e.turn_id === t);
          await sleep(200);
        },
      );
      expectEqual(
        'the planner sees delegate.failed, tool.failed, turn.cancelled',
        ['delegate.failed', 'tool.failed', 'turn.cancelled'],
        tail(turnShape(events, turn), 3),
      );
      expectEqual(
        'delegate.failed.failure_mode',
        'cancelled_by_user',
        events.find((e) => e.type === 'delegate.failed')?.payload.failure_mode,
      );
      return undefined;
    },
  },
  {
    name: 'idempotent_cancel',
    sse: true,
    covers: '§11.1 test 10, §6.5',
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(session);
      const turn = await ctx.submit(session, 'slow: twice');
      await ctx.eventOf(client, 'text.delta', (e) => e.turn_id === turn);
      client.send({ type: 'cancel', turn_id: turn, reason: 'user_cancel' });
      client.send({ type: 'cancel', turn_id: turn, reason: 'user_cancel' });
      await ctx.turnEnd(client, turn);
      await sleep(200);
      const events = client.events().filter((e) => e.turn_id === turn);
      expectEqual('one turn.cancelled', 1, events.filter((e) => e.type === 'turn.cancelled').length);
      expectEqual('one llm.call_failed', 1, events.filter((e) => e.type === 'llm.call_failed').length);
      expectTrue(
        'the connection stays open',
        client.frames.every((f) => f.type !== 'subscribe_error'),
      );
      return undefined;
    },
  },
];
