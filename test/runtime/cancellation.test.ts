import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { createRuntime } from '../../src/core/runtime/runtime.js';
import { captureLogs, LEVEL, settleLogs } from '../helpers/log-capture.js';
import { isGone } from '../helpers/processes.js';
import { byType, type RuntimeHarness, shape, startRuntime } from '../helpers/runtime.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

const ROUNDS = 8;
/** §6.2.3 rounds per observable point of the seam (three points). */
const SEAM_ROUNDS_PER_POINT = 4;
/** §6.2.4 rounds; the scripted model runs at zero delay, so these are fast. */
const FOLLOW_UP_ROUNDS = 16;

function randomInt(max: number): number {
  return Math.floor(Math.random() * max);
}

/** A Fisher-Yates shuffle of a copy. */
function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i -= 1) {
    const j = randomInt(i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** How many text.delta events the second model call of an uncancelled `time` turn streams. */
async function secondCallDeltas(): Promise<number> {
  const h = startRuntime();
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  await h.settle(h.runtime.submitTurn(session.id, 'time').done);
  const frames = h.framesOf(session.id);
  const second = byType(frames, 'message.start')[1]!;
  const count = byType(frames, 'text.delta').filter((e) => e.parent_event_id === second.id).length;
  await h.runtime.close();
  return count;
}

/** Catalog events (persisted) of a session, in id order. */
function persisted(h: RuntimeHarness, sessionId: string): MetisEvent[] {
  return h.framesOf(sessionId).filter((e) => e.seq !== null);
}

/** Polls `check` for up to five seconds: the kernel reaps a killed process a moment after the signal. */
async function eventually(check: () => boolean): Promise<boolean> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return check();
}

function waitForPid(file: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const poll = () => {
      if (existsSync(file) && readFileSync(file, 'utf8').trim())
        return resolve(Number(readFileSync(file, 'utf8').trim()));
      if (Date.now() - started > 10_000) return reject(new Error(`no pid in ${file}`));
      setTimeout(poll, 5);
    };
    poll();
  });
}

/**
 * Parents of a cancel during tool dispatch or at the seam (§6.2.2/§6.2.3, catalog §6.2/§6.4): the
 * tool was called by the completed model call, fails from its tool.called, and the cancellation
 * descends from the turn.
 */
function expectToolCancelParents(events: readonly MetisEvent[]): void {
  const one = (type: string) => byType(events, type)[0]!;
  const called = one('tool.called');
  expect(called.parent_event_id).toBe(one('llm.call_completed').id);
  expect(one('llm.call_completed').parent_event_id).toBe(one('llm.call_started').id);
  expect(one('tool.failed').parent_event_id).toBe(called.id);
  expect(one('tool.failed').payload.tool_use_id).toBe(called.payload.tool_use_id);
  expect(one('turn.cancelled').parent_event_id).toBe(one('turn.started').id);
}

describe('cancellation (streaming spec §6.2)', () => {
  it('mid-LLM (§6.2.1, test 7): message.complete cancelled with partial content, llm.call_failed, turn.cancelled', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const h = startRuntime();
      const session = h.runtime.createSession({ workspacePath: h.workspace });
      const cancelAfter = 1 + randomInt(30);
      let deltas = 0;
      let turnId = '';
      h.runtime.streaming.subscribe((event) => {
        if (event.type === 'text.delta' && ++deltas === cancelAfter) h.runtime.cancelTurn(session.id, turnId);
      });
      const submitted = h.runtime.submitTurn(session.id, 'slow: the history of rivers');
      turnId = submitted.turnId;
      const outcome = await submitted.done;
      await h.context.flush();
      expect(outcome.status).toBe('cancelled');
      const events = h.framesOf(session.id);
      expect(shape(events).slice(-5)).toEqual([
        'message.start',
        'text.delta*',
        'message.complete',
        'llm.call_failed',
        'turn.cancelled',
      ]);
      const complete = byType(events, 'message.complete')[0]!.payload;
      expect(complete.stop_reason).toBe('cancelled');
      const text = byType(events, 'text.delta')
        .map((e) => e.payload.text)
        .join('');
      expect(complete.final_content).toEqual([{ type: 'text', text }]);
      expect(byType(events, 'text.delta')).toHaveLength(cancelAfter);
      expect(byType(events, 'llm.call_failed')[0]!.payload.error_class).toBe('cancelled');
      expect(byType(events, 'turn.cancelled')[0]!.payload).toMatchObject({
        reason: 'user_cancel',
        partial_llm_calls: 1,
      });
      expect(byType(events, 'tool.failed')).toHaveLength(0);
      // Parents (catalog §6.2/§6.3): the failed call descends from its llm.call_started, the
      // cancellation from the turn. message.complete closes that call's stream before the bus events.
      const one = (type: string) => byType(events, type)[0]!;
      const turn = one('turn.started');
      const callStarted = one('llm.call_started');
      expect(callStarted.parent_event_id).toBe(turn.id);
      expect(one('llm.call_failed').parent_event_id).toBe(callStarted.id);
      expect(one('turn.cancelled').parent_event_id).toBe(turn.id);
      expect(one('message.start').parent_event_id).toBe(callStarted.id);
      expect(one('message.complete').parent_event_id).toBe(one('message.start').id);
      expect(byType(events, 'text.delta').at(-1)!.id < one('message.complete').id).toBe(true);
      expect(one('message.complete').id < one('llm.call_failed').id).toBe(true);
      expect(one('llm.call_failed').id < one('turn.cancelled').id).toBe(true);
      const assistant = h.runtime.sessions.messages(session.id).find((m) => m.role === 'assistant')!;
      expect(assistant.status).toBe('cancelled');
      await h.runtime.close();
    }
  });

  it('mid-tool (§6.2.2, test 8): tool.failed cancelled, turn.cancelled, the process tree is gone', async () => {
    for (let round = 0; round < 4; round += 1) {
      let toolStarted!: () => void;
      const running = new Promise<void>((resolve) => {
        toolStarted = resolve;
      });
      const h = startRuntime({}, { beforeToolExecute: async () => toolStarted() });
      const session = h.runtime.createSession({ workspacePath: h.workspace });
      const pidFile = join(h.workspace, 'child.pid');
      const { turnId, done } = h.runtime.submitTurn(
        session.id,
        `run: (sleep 30 & echo $! > ${pidFile}; wait)`,
      );
      await running;
      const childPid = await waitForPid(pidFile);
      await new Promise((resolve) => setTimeout(resolve, randomInt(50)));
      h.runtime.cancelTurn(session.id, turnId);
      await done;
      await h.context.flush();
      const events = persisted(h, session.id);
      expect(events.map((e) => e.type).slice(-4)).toEqual([
        'llm.call_completed',
        'tool.called',
        'tool.failed',
        'turn.cancelled',
      ]);
      expect(byType(events, 'tool.failed')[0]!.payload.error_class).toBe('cancelled');
      expect(byType(events, 'llm.call_failed')).toHaveLength(0);
      expect(byType(h.framesOf(session.id), 'message.complete')).toHaveLength(1);
      expect(await eventually(() => isGone(childPid))).toBe(true);
      const toolUseId = String(byType(events, 'tool.called')[0]!.payload.tool_use_id);
      expect(h.runtime.sessions.toolCall(toolUseId)!.status).toBe('cancelled');
      expectToolCancelParents(events);
      await h.runtime.close();
    }
  });

  it('at the seam (§6.2.3, test 8b): cancelled at a random point between llm.call_completed and execute(), pending tools fail as cancelled and never run', async () => {
    // The points of the window a canceller can observe: the bus delivering llm.call_completed, the bus
    // delivering tool.called, and the dispatcher about to enter execute() (the beforeExecute hook).
    // The hook holds execute() until the bus has delivered tool.called, so each point lies inside the
    // window whatever the timing: the cancel always follows an observed event, never a timer.
    const points = ['llm.call_completed', 'tool.called', 'beforeExecute'] as const;
    const schedule = shuffled(
      points.flatMap((point) => Array.from({ length: SEAM_ROUNDS_PER_POINT }, () => point)),
    );
    expect(schedule.length).toBeGreaterThanOrEqual(10);
    for (const point of schedule) {
      let h!: RuntimeHarness;
      let sessionId = '';
      let turnId = '';
      const results: string[] = [];
      const cancel = () => results.push(h.runtime.cancelTurn(sessionId, turnId));
      let toolCalledSeen!: () => void;
      const toolCalledDelivered = new Promise<void>((resolve) => {
        toolCalledSeen = resolve;
      });
      h = startRuntime(
        {},
        {
          beforeToolExecute: async () => {
            await toolCalledDelivered;
            if (point === 'beforeExecute') cancel();
          },
        },
      );
      h.context.bus.subscribe({
        name: 'seam-canceller',
        fastPath: true,
        filter: { event_types: ['llm.call_completed', 'tool.called'] },
        handler: (event) => {
          if (event.session_id !== sessionId) return;
          if (event.type === point) cancel();
          if (event.type === 'tool.called') toolCalledSeen();
        },
      });
      const session = h.runtime.createSession({ workspacePath: h.workspace });
      sessionId = session.id;
      const marker = join(h.workspace, 'ran.txt');
      const submitted = h.runtime.submitTurn(session.id, `run: touch ${marker}`);
      turnId = submitted.turnId;
      const outcome = await submitted.done;
      await h.context.flush();
      expect(results, point).toEqual(['cancelling']);
      expect(outcome.status, point).toBe('cancelled');
      expect(shape(h.framesOf(session.id)), point).toEqual([
        'session.created',
        'turn.started',
        'route.decided',
        'llm.call_started',
        'message.start',
        'text.delta*',
        'tool.use_start',
        'tool.use_input_delta*',
        'tool.use_end',
        'message.complete',
        'llm.call_completed',
        'tool.called',
        'tool.failed',
        'turn.cancelled',
      ]);
      const events = persisted(h, session.id);
      expect(byType(events, 'tool.failed')[0]!.payload).toMatchObject({
        error_class: 'cancelled',
        error_message: 'the turn was cancelled before this tool ran',
      });
      expect(byType(events, 'turn.cancelled')[0]!.payload).toMatchObject({
        reason: 'user_cancel',
        partial_llm_calls: 1,
        partial_tool_calls: 1,
      });
      expect(existsSync(marker), point).toBe(false);
      const toolUseId = String(byType(events, 'tool.called')[0]!.payload.tool_use_id);
      expect(h.runtime.sessions.toolCall(toolUseId)!.status).toBe('cancelled');
      expectToolCancelParents(events);
      await h.runtime.close();
    }
  });

  it('during a follow-up call (§6.2.4): cancelled at a random text.delta of the second call (or before its first), it ends like §6.2.1', async () => {
    // The second call's deltas, from one uncancelled turn (the scripted model is deterministic).
    const deltas = await secondCallDeltas();
    expect(deltas).toBeGreaterThanOrEqual(2);
    // cancelAt 0 cancels at the second call's message.start, before its first delta; k > 0 cancels
    // as the k-th delta arrives, the last one included (the stream has nothing left to send, but
    // message.complete is not out yet). The first rounds pin both ends, the rest are random.
    const picks = [0, deltas, deltas - 1];
    for (let round = 0; round < FOLLOW_UP_ROUNDS; round += 1) {
      const cancelAt = picks[round] ?? randomInt(deltas + 1);
      const h = startRuntime();
      const session = h.runtime.createSession({ workspacePath: h.workspace });
      let starts = 0;
      let secondDeltas = 0;
      let turnId = '';
      const results: string[] = [];
      h.runtime.streaming.subscribe((event) => {
        if (event.session_id !== session.id) return;
        if (event.type === 'message.start') starts += 1;
        if (starts !== 2) return;
        const hit =
          (event.type === 'message.start' && cancelAt === 0) ||
          (event.type === 'text.delta' && ++secondDeltas === cancelAt);
        if (hit) results.push(h.runtime.cancelTurn(session.id, turnId));
      });
      const submitted = h.runtime.submitTurn(session.id, 'time');
      turnId = submitted.turnId;
      const outcome = await submitted.done;
      await h.context.flush();
      const label = `cancel at ${cancelAt} of ${deltas}`;
      expect(results, label).toEqual(['cancelling']);
      expect(outcome.status, label).toBe('cancelled');
      const frames = h.framesOf(session.id);
      expect(shape(frames), label).toEqual([
        'session.created',
        'turn.started',
        'route.decided',
        'llm.call_started',
        'message.start',
        'text.delta*',
        'tool.use_start',
        'tool.use_input_delta*',
        'tool.use_end',
        'message.complete',
        'llm.call_completed',
        'tool.called',
        'tool.completed',
        'llm.call_started',
        'message.start',
        ...(cancelAt > 0 ? ['text.delta*'] : []),
        'message.complete',
        'llm.call_failed',
        'turn.cancelled',
      ]);
      const secondStart = byType(frames, 'message.start')[1]!;
      const secondText = byType(frames, 'text.delta').filter((e) => e.parent_event_id === secondStart.id);
      expect(secondText, label).toHaveLength(cancelAt);
      const complete = byType(frames, 'message.complete')[1]!;
      expect(complete.parent_event_id).toBe(secondStart.id);
      expect(complete.payload.stop_reason).toBe('cancelled');
      const text = secondText.map((e) => e.payload.text).join('');
      expect(complete.payload.final_content).toEqual(cancelAt > 0 ? [{ type: 'text', text }] : []);
      expect(byType(frames, 'message.complete')[0]!.payload.stop_reason).toBe('tool_use');
      const events = persisted(h, session.id);
      const turn = byType(events, 'turn.started')[0]!;
      const secondCall = byType(events, 'llm.call_started')[1]!;
      expect(secondCall.parent_event_id).toBe(byType(events, 'tool.completed')[0]!.id);
      expect(secondStart.parent_event_id).toBe(secondCall.id);
      expect(byType(events, 'llm.call_failed')[0]!.parent_event_id).toBe(secondCall.id);
      expect(byType(events, 'llm.call_failed')[0]!.payload.error_class).toBe('cancelled');
      expect(byType(events, 'turn.cancelled')[0]!.parent_event_id).toBe(turn.id);
      expect(byType(events, 'turn.cancelled')[0]!.payload).toMatchObject({
        reason: 'user_cancel',
        partial_llm_calls: 2,
        partial_tool_calls: 1,
      });
      const assistants = h.runtime.sessions.messages(session.id).filter((m) => m.role === 'assistant');
      expect(assistants.map((m) => m.status)).toEqual(['complete', 'cancelled']);
      await h.runtime.close();
    }
  });

  it('during delegation (§6.4, test 9): worker cancels, delegate.failed cancelled_by_user, then turn.cancelled', async () => {
    for (let round = 0; round < 4; round += 1) {
      const h = startRuntime();
      const planner = h.runtime.createSession({ workspacePath: h.workspace });
      const cancelAfter = 1 + randomInt(20);
      let workerDeltas = 0;
      let turnId = '';
      h.runtime.streaming.subscribe((event) => {
        if (
          event.session_id !== planner.id &&
          event.type === 'text.delta' &&
          ++workerDeltas === cancelAfter
        ) {
          h.runtime.cancelTurn(planner.id, turnId);
        }
      });
      const submitted = h.runtime.submitTurn(planner.id, 'delegate: slow: a very long survey');
      turnId = submitted.turnId;
      await submitted.done;
      await h.context.flush();
      const plannerEvents = persisted(h, planner.id);
      const workerId = String(byType(plannerEvents, 'delegate.started')[0]!.payload.worker_session_id);
      const workerEvents = persisted(h, workerId);
      expect(workerEvents.map((e) => e.type).slice(-3)).toEqual([
        'llm.call_failed',
        'turn.cancelled',
        'session.ended',
      ]);
      expect(plannerEvents.map((e) => e.type).slice(-5)).toEqual([
        'tool.called',
        'delegate.started',
        'delegate.failed',
        'tool.failed',
        'turn.cancelled',
      ]);
      expect(byType(plannerEvents, 'delegate.failed')[0]!.payload.failure_mode).toBe('cancelled_by_user');
      // The worker's cancellation precedes the planner's delegate.failed.
      expect(
        byType(workerEvents, 'turn.cancelled')[0]!.id < byType(plannerEvents, 'delegate.failed')[0]!.id,
      ).toBe(true);
      // Parents. Planner: delegate.started from the call that asked for it (catalog §6.8),
      // delegate.failed from delegate.started (the worker session exists), tool.failed from
      // tool.called, turn.cancelled from the planner's turn.started. Worker: §6.2.1 in its own session.
      const p = (type: string) => byType(plannerEvents, type)[0]!;
      const delegateStarted = p('delegate.started');
      expect(delegateStarted.parent_event_id).toBe(p('llm.call_completed').id);
      expect(p('delegate.failed').parent_event_id).toBe(delegateStarted.id);
      expect(p('delegate.failed').payload).toMatchObject({
        worker_session_id: workerId,
        tool_use_id: p('tool.called').payload.tool_use_id,
      });
      expect(p('tool.failed').parent_event_id).toBe(p('tool.called').id);
      expect(p('tool.failed').payload.error_class).toBe('cancelled');
      expect(p('turn.cancelled').parent_event_id).toBe(p('turn.started').id);
      expect(p('turn.cancelled').payload.reason).toBe('user_cancel');
      const w = (type: string) => byType(workerEvents, type)[0]!;
      expect(w('turn.started').parent_event_id).toBeNull();
      expect(w('llm.call_started').parent_event_id).toBe(w('turn.started').id);
      expect(w('llm.call_failed').parent_event_id).toBe(w('llm.call_started').id);
      expect(w('llm.call_failed').payload.error_class).toBe('cancelled');
      expect(w('turn.cancelled').parent_event_id).toBe(w('turn.started').id);
      expect(w('session.ended').parent_event_id).toBeNull();
      await h.runtime.close();
    }
  });

  it('a second cancel is a no-op that only logs bus.handler_warning (§6.5, test 10)', async () => {
    const { logger, at } = captureLogs();
    const context = tempTraceContext();
    const committed: MetisEvent[] = [];
    context.writer.onCommit((batch) => committed.push(...batch));
    const runtime = createRuntime({
      bus: context.bus,
      store: context.port,
      logger,
      config: { scripted: { token_delay_ms: 0, slow_token_delay_ms: 5, slow_tokens: 400 } },
    });
    onTestFinished(() => runtime.close());
    const session = runtime.createSession({ workspacePath: tempDir('metis-ws-') });
    let turnId = '';
    const results: string[] = [];
    runtime.streaming.subscribe((event) => {
      if (event.type === 'text.delta' && results.length === 0) {
        results.push(runtime.cancelTurn(session.id, turnId));
        results.push(runtime.cancelTurn(session.id, turnId, 'timeout'));
        // A third, and a fourth: logged too, at debug (a client repeating a cancel floods no log).
        results.push(runtime.cancelTurn(session.id, turnId, 'client_disconnect'));
      }
    });
    const submitted = runtime.submitTurn(session.id, 'slow: twice');
    turnId = submitted.turnId;
    expect((await submitted.done).status).toBe('cancelled');
    await context.flush();
    await settleLogs();
    results.push(runtime.cancelTurn(session.id, turnId));
    await settleLogs();
    expect(results).toEqual(['cancelling', 'already_cancelling', 'already_cancelling', 'already_ended']);
    const events = committed.filter((e) => e.session_id === session.id);
    expect(byType(events, 'turn.cancelled')).toHaveLength(1);
    expect(byType(events, 'turn.cancelled')[0]!.payload.reason).toBe('user_cancel');
    expect(byType(events, 'llm.call_failed')).toHaveLength(1);
    // No canonical event for the redundant cancel; the server logs bus.handler_warning (§6.5).
    expect(events.filter((e) => e.type.startsWith('bus.'))).toEqual([]);
    const warnings = at(LEVEL.warn).filter((r) => r.diagnostic === 'bus.handler_warning');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ session_id: session.id, turn_id: turnId, reason: 'timeout' });
    const later = at(LEVEL.debug).filter((r) => r.diagnostic === 'bus.handler_warning');
    expect(later.map((r) => r.outcome)).toEqual(['already_cancelling', 'already_ended']);
    expect(at(LEVEL.error)).toEqual([]);
  });

  it('the turn timeout cancels with reason timeout', async () => {
    const h = startRuntime({ turn_timeout_ms: 30 });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'slow: forever');
    await done;
    await h.context.flush();
    const cancelled = byType(persisted(h, session.id), 'turn.cancelled');
    expect(cancelled.map((e) => e.payload.reason)).toEqual(['timeout']);
    expect(cancelled[0]!.parent_event_id).toBe(byType(persisted(h, session.id), 'turn.started')[0]!.id);
  });
});
