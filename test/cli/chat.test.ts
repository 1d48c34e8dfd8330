import { describe, expect, it } from 'vitest';
import { HAS_SCRIPT, KEY, metisInPty } from '../helpers/pty.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

describe('metis chat (issue 17)', () => {
  it.skipIf(!HAS_SCRIPT)(
    'asks, approves a tool with the arrow keys, cancels a turn with Ctrl-C and leaves with Ctrl-D, in one terminal',
    async () => {
      const t = await startTestServer({
        tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
        scripted: { slow_token_delay_ms: 20 },
      });
      const chat = metisInPty(['chat', '--url', t.url]);
      let at = await chat.waitFor('◆  you');
      const sessionId = /metis chat · (sess_\w+) \(new\)/.exec(chat.screen())![1]!;

      chat.type(`run: echo approved-here${KEY.enter}`);
      at = await chat.waitFor('Let shell run?', at);
      expect(chat.screen().slice(at - 400, at)).toContain('echo approved-here');
      chat.type(KEY.down); // "Allow for this session"
      await new Promise((resolve) => setTimeout(resolve, 200));
      chat.type(KEY.enter);
      at = await chat.waitFor('■ turn done', at);
      expect(chat.screen()).toContain('confirmation allow');
      expect(chat.screen()).toContain('approved-here');

      at = await chat.waitFor('◆  you', at);
      chat.type(`slow: a long story${KEY.enter}`);
      at = await chat.waitFor('Slowly about a long story', at);
      chat.type(KEY.ctrlC);
      at = await chat.waitFor('■ turn cancelled (user_cancel)', at);

      at = await chat.waitFor('◆  you', at);
      chat.type(KEY.ctrlD);
      await chat.waitFor(`resume with: metis chat ${sessionId}`, at);
      expect(await chat.exited).toBe(0);

      await t.context.flush();
      const ends = t.context.db
        .prepare(
          "SELECT type FROM events WHERE session_id = ? AND type IN ('turn.completed', 'turn.cancelled') ORDER BY id",
        )
        .pluck()
        .all(sessionId);
      expect(ends).toEqual(['turn.completed', 'turn.cancelled']);
    },
    60_000,
  );

  it.skipIf(!HAS_SCRIPT)(
    '/model lists the models the server can serve (GET /models); a failed turn advises /model, not --model (issue 29)',
    async () => {
      const t = await startTestServer({
        pricing: { 'scripted:priced': { input_per_mtok: 1, output_per_mtok: 2 } },
      });
      const chat = metisInPty(['chat', '--url', t.url]);
      let at = await chat.waitFor('◆  you');
      chat.type(`/model${KEY.enter}`);
      at = await chat.waitFor('/model <model> pins one', at);
      const listed = chat.screen().slice(0, at);
      expect(listed).toContain('the server can serve:');
      expect(listed).toMatch(/scripted:demo {2}\(default\)/);
      expect(listed).toContain('scripted:priced');

      at = await chat.waitFor('◆  you', at);
      chat.type(`fail: rate_limit${KEY.enter}`);
      at = await chat.waitFor('■ turn failed (rate_limit)', at);
      await chat.waitFor('pick another model with', at);
      const advice = chat.screen().slice(at);
      expect(advice).toContain('pick another model with /model');
      expect(advice).not.toContain('--model');
      chat.type(KEY.ctrlD);
    },
    60_000,
  );

  it('without a terminal it says to use send --follow, exit 2', async () => {
    const { runCli } = await import('../helpers/run-cli.js');
    const result = await runCli(['chat', '--url', 'http://127.0.0.1:9'], tempDir());
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('metis chat needs a terminal');
    expect(result.stderr).toContain('metis send <session> "message" --follow');
  }, 30_000);
});

describe('approvals answered in place by send --follow and tail (issue 17)', () => {
  it.skipIf(!HAS_SCRIPT)(
    'on a terminal, send --follow asks; the answer runs the tool',
    async () => {
      const t = await startTestServer({
        tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
      });
      const sessionId = await t.createSession();
      const send = metisInPty(['send', sessionId, '"run: echo in-place"', '--follow', '--url', t.url]);
      let at = await send.waitFor('Let shell run?');
      expect(send.screen()).toContain('echo in-place');
      expect(send.screen()).not.toContain('metis confirm');
      send.type(KEY.enter); // "Allow once"
      at = await send.waitFor('■ turn done', at);
      expect(send.screen()).toContain('confirmation allow');
      expect(await send.exited).toBe(0);
    },
    60_000,
  );

  it.skipIf(!HAS_SCRIPT)(
    'on a terminal, tail asks too; Deny refuses the tool',
    async () => {
      const t = await startTestServer({
        tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
      });
      const sessionId = await t.createSession();
      const tail = metisInPty(['tail', sessionId, '--url', t.url]);
      await tail.waitFor(`session ${sessionId}`);
      await t.submit(sessionId, 'run: echo never');
      const at = await tail.waitFor('Let shell run?');
      tail.type(`${KEY.down}${KEY.down}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
      tail.type(KEY.enter); // "Deny"
      await tail.waitFor('confirmation deny', at);
      await tail.waitFor('■ turn', at);
      tail.type(KEY.ctrlC);
      expect(await tail.exited).toBe(0);
    },
    60_000,
  );
});
