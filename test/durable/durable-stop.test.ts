import { describe, expect, it } from 'vitest';
import { eventually } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { durableProject, notLinux, post, storeReader } from './durable-helpers.js';

/*
 * Issue 31 part 1: the cap on resumptions of one turn, and a SIGTERM that drains running turns and
 * hands the rest over to the next start, on a real `metis serve` child (docs/runtime.md "Durable turns").
 */

const linuxOnly = notLinux('durable-stop');

async function startTurn(url: string, home: string, message: string) {
  const sessionId = (await post(url, '/sessions', { workspace_path: home })).body.session_id as string;
  const turnId = (await post(url, `/sessions/${sessionId}/turns`, { message })).body.turn_id as string;
  return { sessionId, turnId };
}

describe.skipIf(linuxOnly)('durable turns: the resumption cap, and SIGTERM draining', () => {
  it('past runtime.max_resumptions the turn ends failed with resumption_cap_reached', async () => {
    const { home, dbPath, args } = durableProject({ max_resumptions: 1 });
    const first = await serveCli(home, args);
    const { sessionId, turnId } = await startTurn(first.url, home, 'slow: a story');
    const store = storeReader(dbPath);
    const calls = () => store.turn(turnId).filter((e) => e.type === 'llm.call_started').length;
    expect(await eventually(() => calls() === 1, 20_000)).toBe(true);
    await first.stop('SIGKILL');
    const second = await serveCli(home, args);
    expect(await eventually(() => calls() === 2, 20_000)).toBe(true);
    await second.stop('SIGKILL');

    const third = await serveCli(home, args);
    expect(JSON.parse(third.stdout().split('\n')[0]!)).toMatchObject({
      recovered_turns: 1,
      resumed_turns: 0,
    });
    const end = store.turn(turnId).at(-1)!;
    expect(end).toMatchObject({
      type: 'turn.completed',
      payload: { signals_extra: { failure: 'resumption_cap_reached', max_resumptions: 1 } },
    });
    expect(store.seqWhole(sessionId)).toBe(true);
    expect(await third.stop('SIGTERM')).toBe(0);
  }, 90_000);

  it('SIGTERM drains: new turns get 503, a turn that ends in time ends, the rest resume at the next start', async () => {
    const { home, dbPath, args } = durableProject({}, { shutdown_timeout_ms: 4000 });
    const first = await serveCli(home, args);
    const long = await startTurn(first.url, home, 'slow: a long story');
    const store = storeReader(dbPath);
    expect(
      await eventually(() => store.turn(long.turnId).some((e) => e.type === 'llm.call_started'), 20_000),
    ).toBe(true);
    const short = await startTurn(first.url, home, 'run: sleep 1');
    const other = (await post(first.url, '/sessions', { workspace_path: home })).body.session_id as string;
    process.kill(first.pid, 'SIGTERM');
    // The signal lands within ms; until then the turn is still taken (and drained like the others).
    let refused = await post(first.url, `/sessions/${other}/turns`, { message: 'hello' });
    for (let i = 0; i < 50 && refused.status !== 503; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      const fresh = (await post(first.url, '/sessions', { workspace_path: home })).body?.session_id;
      refused = await post(first.url, `/sessions/${fresh ?? other}/turns`, { message: 'hello' });
    }
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe('METIS_ERR_SERVER_DRAINING');
    expect(await first.exited()).toBe(0);
    // The short turn ended within the drain; the long one is left open, neither cancelled nor failed.
    expect(store.turn(short.turnId).at(-1)).toMatchObject({ type: 'turn.completed' });
    expect(store.ended(long.turnId)).toBe(false);
    expect(store.turn(long.turnId).some((e) => e.type === 'llm.call_failed')).toBe(false);

    const second = await serveCli(home, args);
    expect(await eventually(() => store.ended(long.turnId), 30_000)).toBe(true);
    expect(store.turn(long.turnId).at(-1)).toMatchObject({ type: 'turn.completed' });
    expect(store.turn(long.turnId).at(-1)!.payload.signals_extra ?? null).toBeNull();
    expect(store.seqWhole(long.sessionId)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
  }, 90_000);
});
