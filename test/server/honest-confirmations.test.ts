import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { subscribe, waitForType } from '../helpers/protocol.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/** `run:` calls the shell tool (side effects: execute), which this config asks about. */
const ASK_EXECUTE = { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } } as const;

/**
 * The command of issue 13, 286 characters: a harmless head, padding that pushes the rest past the old
 * 200-character summary, and a tail that leaves a marker file (so a test can tell whether it ran).
 */
function longCommand(): string {
  const head = 'echo visible-head';
  const tail = ' && echo hidden-tail-ran > tail-marker.txt';
  const command = `${head} ${'a'.repeat(286 - head.length - tail.length - 1)}${tail}`;
  expect(command).toHaveLength(286);
  return command;
}

async function waitingFor(t: TestServer, message: string) {
  const sessionId = await t.createSession();
  const watcher = await subscribe(t, sessionId, { snapshot: false });
  await t.submit(sessionId, message);
  await waitForType(watcher.client, 'tool.confirmation_requested');
  const events = watcher.client.events();
  const requested = events.find((e) => e.type === 'tool.confirmation_requested')!;
  const called = events.find((e) => e.type === 'tool.called')!;
  return { sessionId, watcher, requested, called, requestId: requested.payload.confirmation_request_id };
}

describe('honest confirmations: the whole input before a decision (issue 13, obs. 3)', () => {
  it('a 286-character command: all of it in the event and the listing; a wrong hash decides nothing, the right one runs it', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const command = longCommand();
    const { sessionId, watcher, requested, called, requestId } = await waitingFor(t, `run: ${command}`);

    // The event carries the whole command (it was cut at 200 with the tail hidden).
    expect(requested.payload.command_summary).toBe(command);

    // The listing has the full input and the same hash as tool.called.input_hash.
    const listing = await t.request('GET', `/sessions/${sessionId}/confirmations`);
    expect(listing.status).toBe(200);
    expect(listing.body.confirmations).toHaveLength(1);
    const [pending] = listing.body.confirmations;
    expect(pending).toMatchObject({
      session_id: sessionId,
      confirmation_request_id: requestId,
      tool_use_id: called.payload.tool_use_id,
      tool_name: 'shell',
      side_effects: 'execute',
      input: { command },
      command_summary: command,
      expires_at: requested.payload.expires_at,
    });
    expect(pending.input_hash).toBe(called.payload.input_hash);
    expect(pending.input_hash).toBe(createHash('sha256').update(JSON.stringify(pending.input)).digest('hex'));

    // A decision about some other input: 409, and nothing is decided.
    const wrong = await t.request('POST', `/sessions/${sessionId}/confirmations/${requestId}`, {
      decision: 'allow',
      input_hash: '0'.repeat(64),
    });
    expect(wrong.status).toBe(409);
    expect(wrong.body.error.code).toBe('METIS_ERR_CONFIRMATION_MISMATCH');
    expect(t.runtime.confirmations.pendingIn(sessionId)).toEqual([requestId]);
    expect(existsSync(join(t.workspace, 'tail-marker.txt'))).toBe(false);
    expect(watcher.client.events().map((e) => e.type)).not.toContain('tool.confirmation_resolved');

    // The hash of what was listed: the call runs, tail included.
    const right = await t.request('POST', `/sessions/${sessionId}/confirmations/${requestId}`, {
      decision: 'allow',
      input_hash: pending.input_hash,
    });
    expect(right.status).toBe(200);
    await waitForType(watcher.client, 'turn.completed');
    expect(watcher.client.events().find((e) => e.type === 'tool.completed')!.payload.success).toBe(true);
    expect(existsSync(join(t.workspace, 'tail-marker.txt'))).toBe(true);
    // Answered: the listing is empty again.
    const after = await t.request('GET', `/sessions/${sessionId}/confirmations`);
    expect(after.body).toEqual({ confirmations: [] });
  }, 30_000);

  it('a malformed input_hash is a 400; a session that does not exist is a 404 on the listing', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const { sessionId, requestId } = await waitingFor(t, 'run: echo hi');
    const bad = await t.request('POST', `/sessions/${sessionId}/confirmations/${requestId}`, {
      decision: 'allow',
      input_hash: 'abc',
    });
    expect(bad.status).toBe(400);
    expect(t.runtime.confirmations.pendingIn(sessionId)).toEqual([requestId]);
    const missing = await t.request('GET', '/sessions/sess_nope/confirmations');
    expect(missing.status).toBe(404);
  }, 30_000);

  it('the wait for approval is left out of latency_ms: allowed after ≥ 1.5 s, and denied after ≥ 1.5 s', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const waitMs = 1_500;
    for (const decision of ['allow', 'deny'] as const) {
      const { sessionId, watcher, requestId } = await waitingFor(t, 'run: echo waited');
      const askedAt = performance.now();
      await sleep(waitMs);
      const answered = await t.request('POST', `/sessions/${sessionId}/confirmations/${requestId}`, {
        decision,
      });
      expect(answered.status).toBe(200);
      const waited = performance.now() - askedAt;
      expect(waited).toBeGreaterThanOrEqual(waitMs);
      await waitForType(watcher.client, 'turn.completed');
      const type = decision === 'allow' ? 'tool.completed' : 'tool.failed';
      const result = watcher.client.events().find((e) => e.type === type)!;
      // Generous: `echo` takes milliseconds; the wait alone was ≥ 1.5 s and used to be counted in.
      expect(result.payload.latency_ms).toBeLessThan(waited / 2);
    }
  }, 40_000);
});
