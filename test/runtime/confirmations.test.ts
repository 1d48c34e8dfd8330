import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import type { MetisError } from '../../src/core/errors.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { byType, type RuntimeHarness, startRuntime } from '../helpers/runtime.js';

/**
 * Tool confirmations (config `runtime.tool_confirmation`, bus §6.4 `tool.confirmation_requested` /
 * `tool.confirmation_resolved`). The scripted model calls `shell` (side effects `execute`) for
 * `run: <cmd>`; every answer comes from a bus subscriber that sees the request, never from a timer.
 */

type Answer = { decision: 'allow' | 'deny'; scope: 'once' | 'session' } | 'cancel' | null;

const CLIENT = 'attach_test_client';

interface Harness extends RuntimeHarness {
  /** Every `tool.confirmation_requested` the answerer saw, in order. */
  readonly requests: MetisEvent[];
  /** Answers for the next requests, in order; a request with no answer left waits. */
  readonly answers: Answer[];
}

function start(config: RuntimeConfigInput): Harness {
  const h = startRuntime(config);
  const requests: MetisEvent[] = [];
  const answers: Answer[] = [];
  h.context.bus.subscribe({
    name: 'confirmation-answerer',
    fastPath: true,
    filter: { event_types: ['tool.confirmation_requested'] },
    handler: (event) => {
      requests.push(event);
      const answer = answers.shift() ?? null;
      if (answer === null) return;
      if (answer === 'cancel') {
        h.runtime.cancelTurn(event.session_id, String(event.turn_id));
        return;
      }
      h.runtime.confirm(
        event.session_id,
        String(event.payload.confirmation_request_id),
        answer.decision,
        answer.scope,
        CLIENT,
      );
    },
  });
  return Object.assign(h, { requests, answers });
}

const ASK: RuntimeConfigInput = { tool_confirmation: { write: 'ask', execute: 'ask', network: 'ask' } };

/** Runs one turn to its end and returns its catalog (persisted) events in id order. */
async function turn(h: Harness, sessionId: string, message: string) {
  const submitted = h.runtime.submitTurn(sessionId, message);
  const outcome = await submitted.done;
  await h.context.flush();
  const events = h.framesOf(sessionId).filter((e) => e.seq !== null && e.turn_id === submitted.turnId);
  return { outcome, events, turnId: submitted.turnId };
}

/** The tool part of a turn: from `tool.called` up to the turn's end. */
function toolPart(events: readonly MetisEvent[]): string[] {
  const types = events.map((e) => e.type);
  return types.slice(types.indexOf('tool.called'));
}

const ASKED_AND_RAN = [
  'tool.called',
  'tool.confirmation_requested',
  'tool.confirmation_resolved',
  'tool.completed',
  'llm.call_started',
  'llm.call_completed',
  'turn.completed',
];
const RAN_WITHOUT_ASKING = [
  'tool.called',
  'tool.completed',
  'llm.call_started',
  'llm.call_completed',
  'turn.completed',
];
const ASKED_AND_FAILED = [
  'tool.called',
  'tool.confirmation_requested',
  'tool.confirmation_resolved',
  'tool.failed',
  'llm.call_started',
  'llm.call_completed',
  'turn.completed',
];
const FAILED_WITHOUT_ASKING = [
  'tool.called',
  'tool.failed',
  'llm.call_started',
  'llm.call_completed',
  'turn.completed',
];

function one(events: readonly MetisEvent[], type: string): MetisEvent {
  const found = byType(events, type);
  expect(found, type).toHaveLength(1);
  return found[0]!;
}

/** Parents and payload links of an asked call (bus §6.4). */
function expectConfirmationChain(events: readonly MetisEvent[], end: 'tool.completed' | 'tool.failed'): void {
  const called = one(events, 'tool.called');
  const requested = one(events, 'tool.confirmation_requested');
  expect(requested.parent_event_id).toBe(called.id);
  expect(requested.payload).toMatchObject({
    tool_use_id: called.payload.tool_use_id,
    tool_name: 'shell',
    side_effects: 'execute',
  });
  const resolved = byType(events, 'tool.confirmation_resolved')[0];
  if (resolved) {
    expect(resolved.parent_event_id).toBe(requested.id);
    expect(resolved.payload.tool_use_id).toBe(called.payload.tool_use_id);
    expect(resolved.payload.confirmation_request_id).toBe(requested.payload.confirmation_request_id);
  }
  expect(one(events, end).parent_event_id).toBe(called.id);
}

function expectNotFound(action: () => void, requestId: string): void {
  let error: unknown;
  try {
    action();
  } catch (e) {
    error = e;
  }
  expect(error, 'answering should throw').toBeInstanceOf(Error);
  expect((error as MetisError).code).toBe('METIS_ERR_CONFIRMATION_NOT_FOUND');
  expect((error as MetisError).message).toContain(requestId);
}

describe('tool confirmations: policy ask', () => {
  it('allow/once runs the tool, and the next call asks again', async () => {
    const h = start(ASK);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    h.answers.push({ decision: 'allow', scope: 'once' }, { decision: 'allow', scope: 'once' });

    const first = await turn(h, session.id, 'run: echo one');
    expect(first.outcome.status).toBe('completed');
    expect(toolPart(first.events)).toEqual(ASKED_AND_RAN);
    expectConfirmationChain(first.events, 'tool.completed');
    const requested = one(first.events, 'tool.confirmation_requested');
    expect(requested.payload).toMatchObject({ command_summary: 'echo one', projected_modifications: null });
    const expiresIn = Date.parse(String(requested.payload.expires_at)) - Date.parse(requested.timestamp);
    expect(Math.abs(expiresIn - 300_000)).toBeLessThan(1_000);
    expect(one(first.events, 'tool.confirmation_resolved').payload).toMatchObject({
      decision: 'allow',
      scope: 'once',
      responding_client_attach_token: CLIENT,
    });

    const second = await turn(h, session.id, 'run: echo two');
    expect(toolPart(second.events)).toEqual(ASKED_AND_RAN);
    expect(h.requests).toHaveLength(2);
    expect(h.runtime.confirmations.pendingIn(session.id)).toEqual([]);
  });

  it('allow/session: later calls in the same session run without asking, another session asks', async () => {
    // A short timeout: were a later call to ask after all, it fails an assert instead of hanging.
    const h = start({ ...ASK, confirmation_timeout_ms: 2_000 });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    h.answers.push({ decision: 'allow', scope: 'session' });

    const first = await turn(h, session.id, 'run: echo one');
    expect(toolPart(first.events)).toEqual(ASKED_AND_RAN);
    expect(one(first.events, 'tool.confirmation_resolved').payload).toMatchObject({
      decision: 'allow',
      scope: 'session',
    });
    for (const command of ['echo two', 'echo three']) {
      const later = await turn(h, session.id, `run: ${command}`);
      expect(toolPart(later.events)).toEqual(RAN_WITHOUT_ASKING);
    }
    expect(h.requests).toHaveLength(1);

    const other = h.runtime.createSession({ workspacePath: h.workspace });
    h.answers.push({ decision: 'allow', scope: 'once' });
    const elsewhere = await turn(h, other.id, 'run: echo four');
    expect(toolPart(elsewhere.events)).toEqual(ASKED_AND_RAN);
    expect(h.requests).toHaveLength(2);
    expect(h.requests[1]!.session_id).toBe(other.id);
  });

  it('deny/once fails the call with user_denied and an error tool_result; the next call asks again', async () => {
    const h = start(ASK);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const marker = join(h.workspace, 'ran.txt');
    h.answers.push({ decision: 'deny', scope: 'once' }, { decision: 'allow', scope: 'once' });

    const first = await turn(h, session.id, `run: touch ${marker}`);
    expect(first.outcome.status).toBe('completed');
    expect(toolPart(first.events)).toEqual(ASKED_AND_FAILED);
    expectConfirmationChain(first.events, 'tool.failed');
    expect(one(first.events, 'tool.confirmation_resolved').payload).toMatchObject({
      decision: 'deny',
      scope: 'once',
      responding_client_attach_token: CLIENT,
    });
    expect(one(first.events, 'tool.failed').payload).toMatchObject({
      error_class: 'user_denied',
      error_message: 'the user denied this tool call',
    });
    expect(existsSync(marker)).toBe(false);
    const toolUseId = String(one(first.events, 'tool.called').payload.tool_use_id);
    expect(h.runtime.sessions.toolCall(toolUseId)).toMatchObject({
      status: 'failed',
      error_class: 'user_denied',
    });
    const results = h.runtime.sessions
      .messages(session.id)
      .filter((m) => m.role === 'tool')
      .flatMap((m) => m.content);
    expect(results).toEqual([
      {
        type: 'tool_result',
        tool_use_id: toolUseId,
        content: 'the user denied this tool call',
        is_error: true,
      },
    ]);

    const second = await turn(h, session.id, `run: touch ${marker}`);
    expect(toolPart(second.events)).toEqual(ASKED_AND_RAN);
    expect(existsSync(marker)).toBe(true);
    expect(h.requests).toHaveLength(2);
  });

  it('deny/session: later calls of that tool in the session fail with user_denied without asking, another session asks', async () => {
    const h = start({ ...ASK, confirmation_timeout_ms: 2_000 });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const marker = join(h.workspace, 'ran.txt');
    h.answers.push({ decision: 'deny', scope: 'session' });

    const first = await turn(h, session.id, `run: touch ${marker}`);
    expect(toolPart(first.events)).toEqual(ASKED_AND_FAILED);
    expect(one(first.events, 'tool.confirmation_resolved').payload).toMatchObject({
      decision: 'deny',
      scope: 'session',
    });
    expect(one(first.events, 'tool.failed').payload.error_class).toBe('user_denied');

    for (let i = 0; i < 2; i += 1) {
      const later = await turn(h, session.id, `run: touch ${marker}`);
      expect(later.outcome.status).toBe('completed');
      expect(toolPart(later.events)).toEqual(FAILED_WITHOUT_ASKING);
      expect(one(later.events, 'tool.failed').payload).toMatchObject({
        error_class: 'user_denied',
        error_message: 'the user denied shell for this session',
      });
      expect(one(later.events, 'tool.failed').parent_event_id).toBe(one(later.events, 'tool.called').id);
    }
    expect(h.requests).toHaveLength(1);
    expect(existsSync(marker)).toBe(false);
    // Tools the user did not deny are unaffected (read_file has no side effects to confirm anyway).
    const read = await turn(h, session.id, 'read: nothing-here.txt');
    expect(byType(read.events, 'tool.failed').map((e) => e.payload.error_class)).toEqual(['not_found']);

    const other = h.runtime.createSession({ workspacePath: h.workspace });
    h.answers.push({ decision: 'allow', scope: 'once' });
    const elsewhere = await turn(h, other.id, `run: touch ${marker}`);
    expect(toolPart(elsewhere.events)).toEqual(ASKED_AND_RAN);
    expect(existsSync(marker)).toBe(true);
    expect(h.requests).toHaveLength(2);
  });

  it('an unanswered request times out: resolved with decision timeout, the call fails with confirmation_timeout', async () => {
    const h = start({ ...ASK, confirmation_timeout_ms: 50 });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const marker = join(h.workspace, 'ran.txt');

    const first = await turn(h, session.id, `run: touch ${marker}`);
    expect(first.outcome.status).toBe('completed');
    expect(toolPart(first.events)).toEqual(ASKED_AND_FAILED);
    expectConfirmationChain(first.events, 'tool.failed');
    const requested = one(first.events, 'tool.confirmation_requested');
    const expiresIn = Date.parse(String(requested.payload.expires_at)) - Date.parse(requested.timestamp);
    expect(Math.abs(expiresIn - 50)).toBeLessThan(1_000);
    expect(one(first.events, 'tool.confirmation_resolved').payload).toMatchObject({
      decision: 'timeout',
      scope: null,
      responding_client_attach_token: null,
    });
    expect(one(first.events, 'tool.failed').payload).toMatchObject({
      error_class: 'confirmation_timeout',
      error_message: 'nobody answered the confirmation in time',
    });
    expect(existsSync(marker)).toBe(false);
    const requestId = String(requested.payload.confirmation_request_id);
    expect(h.runtime.confirmations.pendingIn(session.id)).toEqual([]);
    expectNotFound(() => h.runtime.confirm(session.id, requestId, 'allow'), requestId);

    // A timeout is remembered for nothing: the next call asks again.
    h.answers.push({ decision: 'allow', scope: 'once' });
    const second = await turn(h, session.id, `run: touch ${marker}`);
    expect(toolPart(second.events)).toEqual(ASKED_AND_RAN);
    expect(existsSync(marker)).toBe(true);
  });

  it('a turn cancelled while a confirmation is pending: tool.failed(cancelled) and turn.cancelled close the request, no tool.confirmation_resolved', async () => {
    const h = start(ASK);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const marker = join(h.workspace, 'ran.txt');
    h.answers.push('cancel');

    const cancelled = await turn(h, session.id, `run: touch ${marker}`);
    expect(cancelled.outcome.status).toBe('cancelled');
    expect(cancelled.events.map((e) => e.type)).toEqual([
      'turn.started',
      'route.decided',
      'llm.call_started',
      'llm.call_completed',
      'tool.called',
      'tool.confirmation_requested',
      'tool.failed',
      'turn.cancelled',
    ]);
    expectConfirmationChain(cancelled.events, 'tool.failed');
    expect(one(cancelled.events, 'tool.failed').payload).toMatchObject({
      error_class: 'cancelled',
      error_message: 'the turn was cancelled while waiting for confirmation',
    });
    expect(one(cancelled.events, 'turn.cancelled').payload.reason).toBe('user_cancel');
    expect(one(cancelled.events, 'turn.cancelled').parent_event_id).toBe(
      one(cancelled.events, 'turn.started').id,
    );
    expect(existsSync(marker)).toBe(false);
    const toolUseId = String(one(cancelled.events, 'tool.called').payload.tool_use_id);
    expect(h.runtime.sessions.toolCall(toolUseId)!.status).toBe('cancelled');

    // The request is no longer pending, and answering it afterwards is a clear error.
    const requestId = String(h.requests[0]!.payload.confirmation_request_id);
    expect(h.runtime.confirmations.pendingIn(session.id)).toEqual([]);
    expectNotFound(() => h.runtime.confirm(session.id, requestId, 'allow', 'session'), requestId);
    await h.context.flush();
    expect(byType(h.framesOf(session.id), 'tool.confirmation_resolved')).toEqual([]);

    // Nothing was remembered: the next call asks again.
    h.answers.push({ decision: 'allow', scope: 'once' });
    const next = await turn(h, session.id, `run: touch ${marker}`);
    expect(toolPart(next.events)).toEqual(ASKED_AND_RAN);
    expect(existsSync(marker)).toBe(true);
  });

  it('tools without write/execute/network side effects never ask', async () => {
    const h = start(ASK);
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const time = await turn(h, session.id, 'time');
    expect(toolPart(time.events)).toEqual(RAN_WITHOUT_ASKING);
    expect(h.requests).toEqual([]);
  });
});

describe('tool confirmations: configured policies', () => {
  it('deny never asks and fails the call with user_denied', async () => {
    const h = start({ tool_confirmation: { write: 'ask', execute: 'deny', network: 'ask' } });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const marker = join(h.workspace, 'ran.txt');
    for (let i = 0; i < 2; i += 1) {
      const denied = await turn(h, session.id, `run: touch ${marker}`);
      expect(denied.outcome.status).toBe('completed');
      expect(toolPart(denied.events)).toEqual(FAILED_WITHOUT_ASKING);
      expect(one(denied.events, 'tool.failed').payload).toMatchObject({
        error_class: 'user_denied',
        error_message: 'execute tools are denied by policy',
      });
    }
    expect(existsSync(marker)).toBe(false);
    expect(h.requests).toEqual([]);
    expect(h.runtime.confirmations.pendingIn(session.id)).toEqual([]);
  });

  it('allow never asks and runs the tool', async () => {
    const h = start({ tool_confirmation: { write: 'ask', execute: 'allow', network: 'ask' } });
    const session = h.runtime.createSession({ workspacePath: h.workspace });
    const marker = join(h.workspace, 'ran.txt');
    const allowed = await turn(h, session.id, `run: touch ${marker}`);
    expect(toolPart(allowed.events)).toEqual(RAN_WITHOUT_ASKING);
    expect(existsSync(marker)).toBe(true);
    expect(h.requests).toEqual([]);
  });
});
