import { EventSource } from 'eventsource';
import { describe, expect, it, onTestFinished } from 'vitest';
import { serverToken } from '../helpers/home-token.js';
import { eventually } from '../helpers/protocol.js';
import { serveCli, spawnCli } from '../helpers/run-cli.js';
import { durableProject, notLinux, post } from './durable-helpers.js';

/*
 * Issue 31 part 1, the clients' side: a client following a turn through a SIGKILL and a restart of a
 * real `metis serve` child (SSE with `eventsource`, which reconnects with Last-Event-ID by itself;
 * `metis send --follow`, which reconnects with its cursor) sees the cut message closed and the turn
 * complete (docs/runtime.md "Durable turns").
 */

const linuxOnly = notLinux('durable-clients');

describe.skipIf(linuxOnly)('durable turns: clients following a turn across a restart', () => {
  it('an SSE client reconnecting with Last-Event-ID sees the cut message closed, then the turn go on', async () => {
    const { home, args } = durableProject();
    const first = await serveCli(home, args);
    const sessionId = (await post(first.url, '/sessions', { workspace_path: home })).body
      .session_id as string;
    const token = encodeURIComponent(serverToken(first.url) ?? '');
    const source = new EventSource(
      `${first.url}/sessions/${sessionId}/events?filter=preset:full&token=${token}`,
    );
    onTestFinished(() => source.close());
    const events: any[] = [];
    let acks = 0;
    source.onmessage = (message) => events.push(JSON.parse(message.data).event);
    source.addEventListener('subscribe_ack', () => {
      acks += 1;
    });
    expect(await eventually(() => acks === 1, 10_000)).toBe(true);
    const turnId = (await post(first.url, `/sessions/${sessionId}/turns`, { message: 'slow: a story' })).body
      .turn_id as string;
    expect(await eventually(() => events.filter((e) => e.type === 'text.delta').length >= 3, 20_000)).toBe(
      true,
    );
    const cutMessage = events.find((e) => e.type === 'message.start')!.payload.message_id as string;
    await first.stop('SIGKILL');

    const second = await serveCli(home, args, first.port);
    const ended = () => events.some((e) => e.type === 'turn.completed' && e.turn_id === turnId);
    expect(await eventually(ended, 40_000)).toBe(true);
    expect(acks).toBeGreaterThanOrEqual(2);
    const closing = events.findIndex(
      (e) => e.type === 'message.complete' && e.payload.message_id === cutMessage,
    );
    expect(closing).toBeGreaterThan(0);
    expect(events[closing].payload).toMatchObject({ stop_reason: 'cancelled', error_class: 'network' });
    // Of this turn (the session's own `session.resumed` comes between, outside the turn).
    const after = events.slice(closing + 1).filter((e) => e.turn_id === turnId && !e.type.endsWith('.delta'));
    expect(after.map((e) => e.type).slice(0, 3)).toEqual([
      'llm.call_failed',
      'llm.call_started',
      'message.start',
    ]);
    expect(after[0].payload.error_class).toBe('network');
    const ids = events.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    source.close();
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('send --follow across a SIGKILL and a restart: the cut message closes, the turn completes, exit 0', async () => {
    const { home, args } = durableProject();
    const first = await serveCli(home, args);
    const sessionId = (await post(first.url, '/sessions', { workspace_path: home })).body
      .session_id as string;
    const follower = spawnCli(
      ['send', sessionId, 'slow: a long answer', '--follow', '--url', first.url],
      home,
    );
    await follower.waitForStdout((out) => out.includes('word3'), 30_000);
    await first.stop('SIGKILL');
    const second = await serveCli(home, args, first.port);
    const code = await Promise.race([
      follower.exited(),
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 40_000)),
    ]);
    expect(code, follower.stdout() + follower.stderr()).toBe(0);
    // The cut message is shown closed, the call's failure says the turn goes on, and it does.
    const shown = follower.stdout();
    expect(shown).toContain('(cut short)');
    expect(shown).toMatch(
      /model call failed \(network\): the server stopped during this call; the turn resumed/,
    );
    expect(shown.indexOf('(cut short)')).toBeLessThan(shown.lastIndexOf('turn done: 2 model calls'));
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);
});
