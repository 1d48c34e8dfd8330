import { describe, expect, it } from 'vitest';
import { HAS_SCRIPT, KEY, metisInPty } from '../helpers/pty.js';
import { startTestServer } from '../helpers/server.js';

/**
 * Issue 31 part 2 in `metis chat` (a real child process in a pseudo-terminal, typing as a user does):
 * a line typed while a turn runs is queued on the server and its turn is shown after the running one;
 * a line starting with `>` steers the running turn.
 */
describe('metis chat: typing while a turn runs (issue 31)', () => {
  it.skipIf(!HAS_SCRIPT)(
    'queues a typed line (shown as queued, run and rendered next) and steers with ">"',
    async () => {
      const t = await startTestServer({
        scripted: { slow_token_delay_ms: 25, slow_tokens: 200 },
        tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
      });
      const chat = metisInPty(['chat', '--url', t.url]);
      let at = await chat.waitFor('◆  you');
      const sessionId = /metis chat · (sess_\w+) \(new\)/.exec(chat.screen())![1]!;

      chat.type(`slow: first story${KEY.enter}`);
      at = await chat.waitFor('Slowly about first story', at);
      chat.type(`what comes next${KEY.enter}`);
      at = await chat.waitFor('↳ queued #1: what comes next', at);
      // Every client sees it: the queue of the session holds it while the first turn runs.
      const queue = (await t.request('GET', `/sessions/${sessionId}/queue`)).body.queue;
      expect(queue).toMatchObject([{ message: 'what comes next', mode: 'enqueue', position: 1 }]);
      chat.type(`> also this${KEY.enter}`);
      at = await chat.waitFor('↳ steering the running turn: also this', at);

      // The first turn ends; the chat follows the turns the queue starts, without being asked.
      at = await chat.waitFor('■ turn done', at);
      at = await chat.waitFor('You said: also this', at);
      at = await chat.waitFor('You said: what comes next', at);
      at = await chat.waitFor('■ turn done', at);
      at = await chat.waitFor('◆  you', at);
      chat.type(KEY.ctrlD);
      await chat.waitFor(`resume with: metis chat ${sessionId}`, at);
      expect(await chat.exited).toBe(0);

      const { body } = await t.request('GET', `/sessions/${sessionId}/messages?limit=50`);
      const said = (body.messages as any[])
        .filter((m) => m.role === 'user')
        .map((m) => m.content.map((b: any) => b.text).join(''));
      // A steer the slow one-call turn had no model call left for became the next turn, first.
      expect(said).toEqual(['slow: first story', 'also this', 'what comes next']);
    },
    60_000,
  );
});
