import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { isGone } from '../helpers/processes.js';
import { byType, type RuntimeHarness, shape, startRuntime } from '../helpers/runtime.js';

const ROUNDS = 8;

function randomInt(max: number): number {
  return Math.floor(Math.random() * max);
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
      await h.runtime.close();
    }
  });

  it('at the seam (§6.2.3, test 8b): pending tools fail as cancelled and never run', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      let h!: RuntimeHarness;
      let sessionId = '';
      let turnId = '';
      h = startRuntime({}, { beforeToolExecute: async () => void h.runtime.cancelTurn(sessionId, turnId) });
      const session = h.runtime.createSession({ workspacePath: h.workspace });
      sessionId = session.id;
      const marker = join(h.workspace, 'ran.txt');
      const submitted = h.runtime.submitTurn(session.id, `run: touch ${marker}`);
      turnId = submitted.turnId;
      await submitted.done;
      await h.context.flush();
      const events = persisted(h, session.id);
      expect(events.map((e) => e.type).slice(-4)).toEqual([
        'llm.call_completed',
        'tool.called',
        'tool.failed',
        'turn.cancelled',
      ]);
      expect(byType(events, 'tool.failed')[0]!.payload.error_class).toBe('cancelled');
      expect(existsSync(marker)).toBe(false);
      await h.runtime.close();
    }
  });

  it('during a follow-up call (§6.2.4): the second call ends like §6.2.1', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const h = startRuntime({ scripted: { token_delay_ms: 2 } });
      const session = h.runtime.createSession({ workspacePath: h.workspace });
      let starts = 0;
      let turnId = '';
      h.runtime.streaming.subscribe((event) => {
        if (event.type === 'message.start' && ++starts === 2) h.runtime.cancelTurn(session.id, turnId);
      });
      const submitted = h.runtime.submitTurn(session.id, 'time');
      turnId = submitted.turnId;
      await submitted.done;
      await h.context.flush();
      const events = persisted(h, session.id);
      expect(events.map((e) => e.type).slice(-5)).toEqual([
        'tool.called',
        'tool.completed',
        'llm.call_started',
        'llm.call_failed',
        'turn.cancelled',
      ]);
      expect(byType(h.framesOf(session.id), 'message.complete').map((e) => e.payload.stop_reason)).toEqual([
        'tool_use',
        'cancelled',
      ]);
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
      await h.runtime.close();
    }
  });

  it('a second cancel is a no-op (test 10)', async () => {
    const h = startRuntime();
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    let turnId = '';
    const results: string[] = [];
    h.runtime.streaming.subscribe((event) => {
      if (event.type === 'text.delta' && results.length === 0) {
        results.push(h.runtime.cancelTurn(session.id, turnId));
        results.push(h.runtime.cancelTurn(session.id, turnId, 'timeout'));
      }
    });
    const submitted = h.runtime.submitTurn(session.id, 'slow: twice');
    turnId = submitted.turnId;
    await submitted.done;
    await h.context.flush();
    expect(results).toEqual(['cancelling', 'already_cancelling']);
    const events = persisted(h, session.id);
    expect(byType(events, 'turn.cancelled')).toHaveLength(1);
    expect(byType(events, 'turn.cancelled')[0]!.payload.reason).toBe('user_cancel');
    expect(byType(events, 'llm.call_failed')).toHaveLength(1);
  });

  it('the turn timeout cancels with reason timeout', async () => {
    const h = startRuntime({ turn_timeout_ms: 30 });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const { done } = h.runtime.submitTurn(session.id, 'slow: forever');
    await done;
    await h.context.flush();
    const cancelled = byType(persisted(h, session.id), 'turn.cancelled');
    expect(cancelled.map((e) => e.payload.reason)).toEqual(['timeout']);
  });
});
