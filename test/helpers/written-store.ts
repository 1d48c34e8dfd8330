import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import { startTestServer, type TestServer } from './server.js';

/** `run:` calls the shell tool (side effects: execute), which this config asks about. */
const ASK_EXECUTE = { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } } as const;

/**
 * A store as a server leaves it: turns with thinking, tool calls, a delegation, a confirmation asked and
 * answered, a second session ended; `more` runs on the same server before it stops (sessions: the two
 * created here). Returns the store's path, inside the test server's folder.
 */
export async function writtenStore(
  more?: (t: TestServer, sessions: readonly [string, string]) => Promise<void>,
): Promise<string> {
  const t = await startTestServer(ASK_EXECUTE);
  const first = await t.createSession();
  for (const message of ['think: time', 'delegate: count the files', 'hello'])
    await t.submit(first, message).then(() => t.runtime.currentTurn(first)?.done);
  await t.submit(first, 'run: echo hi');
  let pending: string[] = [];
  while (pending.length === 0) {
    pending = t.runtime.confirmations.pendingIn(first);
    await sleep(10);
  }
  const answered = await t.request('POST', `/sessions/${first}/confirmations/${pending[0]}`, {
    decision: 'allow',
  });
  expect(answered.status).toBe(200);
  await t.runtime.currentTurn(first)?.done;
  const second = await t.createSession();
  await t.submit(second, 'think: é 🙂 "quoted"');
  await t.runtime.currentTurn(second)?.done;
  await t.request('POST', `/sessions/${second}/end`, {});
  await more?.(t, [first, second]);
  await t.server.close();
  await t.runtime.close();
  await t.context.close();
  return t.context.dbPath;
}
