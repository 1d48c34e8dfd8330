import type { Check } from './checks-stream.js';
import { type CheckContext, CheckFailure, expectEqual, expectTrue, sleep } from './context.js';
import type { WireClient } from './wire-client.js';

/** `message.complete.stop_reason` as the spec defines it: §5.3's four values and §6.2.1's `cancelled`. */
const SPEC_STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'cancelled'];

/** `turn.cancelled.reason` in the bus catalog (§6.2), a closed enum. */
const CATALOG_CANCEL_REASONS = ['user_cancel', 'client_disconnect', 'timeout'];

/** How long a refusal (or the lack of one) gets to show on the wire. */
const ANSWER_WAIT_MS = 2_000;

let nonceCounter = 0;

/** A barrier: ping, wait for the pong; every frame the server sent before it has arrived. */
async function settle(client: WireClient): Promise<void> {
  const nonce = `cancel-answers-${++nonceCounter}`;
  client.send({ type: 'ping', nonce });
  await client.waitFor((f) => f.type === 'pong' && f.nonce === nonce, 10_000, `pong ${nonce}`);
}

const errorFrames = (client: WireClient) => client.frames.filter((f) => f.type === 'error');

/** A session with one turn cancelled mid-answer and one completed, both over. */
async function endedTurns(ctx: CheckContext) {
  const session = await ctx.newSession();
  const client = await ctx.attach(session);
  const cancelled = await ctx.submit(session, 'slow: cancel me, then again');
  await ctx.eventOf(client, 'text.delta', (e) => e.turn_id === cancelled);
  client.send({ type: 'cancel', turn_id: cancelled, reason: 'user_cancel' });
  await ctx.turnEnd(client, cancelled);
  const completed = await ctx.submit(session, 'hello');
  await ctx.turnEnd(client, completed);
  return { session, client, cancelled, completed };
}

/**
 * Issue 14 observations 6 and 7: the answers to a cancel. Redundant cancels are no-ops on both
 * transports, a reason the catalog cannot record is refused rather than replaced, and a failed model
 * call's message ends with a stop reason of the spec's enum.
 */
export const cancelAnswerChecks: Check[] = [
  {
    name: 'cancel_after_end',
    covers: '§6.5 (a turn already over), docs/decisions.md "Redundant cancel"',
    async run(ctx) {
      const { session, client, cancelled, completed } = await endedTurns(ctx);
      const before = errorFrames(client).length;
      for (const turn of [cancelled, completed])
        client.send({ type: 'cancel', turn_id: turn, reason: 'user_cancel' });
      await settle(client);
      expectEqual('no error frame for a cancel of an ended turn', [], errorFrames(client).slice(before));
      for (const turn of [cancelled, completed]) {
        const answer = await ctx.api('POST', `/sessions/${session}/turns/${turn}/cancel`, {});
        expectEqual(`POST …/turns/${turn}/cancel of an ended turn answers 202`, 202, answer.status);
      }
      expectEqual(
        'one turn.cancelled, none for the redundant cancels',
        1,
        client.events().filter((e) => e.type === 'turn.cancelled').length,
      );
      const unknown = await ctx.api('POST', `/sessions/${session}/turns/turn_never_was/cancel`, {});
      expectEqual('a turn the session never had is still 404', 404, unknown.status);
      client.send({ type: 'cancel', turn_id: 'turn_never_was', reason: 'user_cancel' });
      const error = await client.waitFor((f) => f.type === 'error', ANSWER_WAIT_MS, 'error turn_not_found');
      expectEqual('a WebSocket cancel of a turn never seen', 'turn_not_found', error.code);
      return undefined;
    },
  },
  {
    name: 'cancel_reason_refused',
    covers: '§4.3 cancel.reason vs catalog turn.cancelled.reason, docs/decisions.md "The cancel reason"',
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(session);
      const turn = await ctx.submit(session, 'slow: a reason the catalog does not know');
      await ctx.eventOf(client, 'text.delta', (e) => e.turn_id === turn);
      client.send({ type: 'cancel', turn_id: turn, reason: 'because I said so' });
      const error = await client
        .waitFor((f) => f.type === 'error', ANSWER_WAIT_MS, 'an error refusing the reason')
        .catch(() => {
          const ended = client.events().find((e) => e.type === 'turn.cancelled' && e.turn_id === turn);
          throw new CheckFailure(
            'a reason outside the catalog enum is refused with an error, not recorded as another reason',
            'error frame',
            ended ? `turn.cancelled reason=${ended.payload.reason}` : 'no answer',
          );
        });
      for (const reason of CATALOG_CANCEL_REASONS)
        expectTrue(
          `the refusal names the allowed value ${reason}`,
          String(error.message).includes(reason),
          error,
        );
      await settle(client);
      expectEqual(
        'the refused cancel did not end the turn',
        [],
        client.events().filter((e) => e.type === 'turn.cancelled' && e.turn_id === turn),
      );
      client.send({ type: 'cancel', turn_id: turn, reason: 'user_cancel' });
      const end = await ctx.turnEnd(client, turn);
      expectEqual('then a valid cancel ends it', 'user_cancel', end.event.payload.reason);
      return undefined;
    },
  },
  {
    name: 'failed_call_stop_reason',
    sse: true,
    covers: '§5.3 message.complete.stop_reason, §9.1, docs/decisions.md "A failed call\'s message"',
    async run(ctx) {
      const session = await ctx.newSession();
      const client = await ctx.attach(session);
      const turn = await ctx.submit(session, 'fail: server_error');
      await ctx.turnEnd(client, turn);
      await sleep(50);
      const events = client.events().filter((e) => e.turn_id === turn);
      const failed = events.find((e) => e.type === 'llm.call_failed');
      expectTrue(
        'the failed call ends with llm.call_failed',
        failed !== undefined,
        events.map((e) => e.type),
      );
      for (const complete of events.filter((e) => e.type === 'message.complete')) {
        expectTrue(
          'message.complete.stop_reason is one of the spec values',
          SPEC_STOP_REASONS.includes(complete.payload.stop_reason),
          complete.payload.stop_reason,
        );
        expectEqual(
          'the cut message names the failure as llm.call_failed does',
          failed.payload.error_class,
          complete.payload.error_class,
        );
      }
      return undefined;
    },
  },
];
