import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { eventually } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';
import { notLinux, post, postgresStoreReader } from './durable-helpers.js';

/*
 * Durable turns on `metis serve --store postgres://…` (docs/runtime.md "Durable turns"): the server
 * runs on PostgreSQL alone (the default for one server), and start-up recovery reads what the crash left
 * from it; a SIGKILL mid-turn, a restart, and the turn goes on and completes, once, in PostgreSQL.
 */

const pg = postgresForFile();
const onPostgres = describe.skipIf(!postgresTestsRun || notLinux('durable-turns-postgres'));

onPostgres('durable turns on PostgreSQL', () => {
  it('a turn cut mid-tool resumes: the stored tool result reused, the running one interrupted', async () => {
    const url = freshDatabase(pg);
    const home = tempDir();
    const configPath = join(home, 'metis.config.json');
    writeFileSync(
      configPath,
      JSON.stringify({
        runtime: {
          tool_confirmation: { execute: 'allow' },
          scripted: { token_delay_ms: 1, slow_token_delay_ms: 20, slow_tokens: 150 },
        },
      }),
    );
    const args = ['--store', url, '--config', configPath];
    const first = await serveCli(home, args);
    // No working copy: nothing of the store in the data folder, only the tool-process record.
    expect(JSON.parse(first.stdout().split('\n')[0]!)).toMatchObject({ db: '' });
    const childRecord = join(home, 'postgres.children');
    const out = join(home, 'once.txt');
    const sessionId = (await post(first.url, '/sessions', { workspace_path: home })).body
      .session_id as string;
    const turnId = (
      await post(first.url, `/sessions/${sessionId}/turns`, {
        message: `run-each: echo once >> ${out} ;; sleep 2348`,
      })
    ).body.turn_id as string;
    const store = postgresStoreReader(pg.psql, url);
    expect(
      await eventually(
        () =>
          store.turn(turnId).some((e) => e.type === 'tool.completed') &&
          store.query("SELECT 1 FROM tool_calls WHERE status = 'running'").length === 1 &&
          existsSync(childRecord),
        20_000,
      ),
    ).toBe(true);
    await first.stop('SIGKILL');

    const second = await serveCli(home, args);
    expect(JSON.parse(second.stdout().split('\n')[0]!)).toMatchObject({ resumed_turns: 1 });
    expect(await eventually(() => store.ended(turnId), 30_000)).toBe(true);
    expect(await second.stop('SIGTERM')).toBe(0);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toEqual(['once']);
    const events = store.turn(turnId);
    expect(events.at(-1)).toMatchObject({ type: 'turn.completed', payload: { tool_call_count: 2 } });
    expect(events.at(-1)!.payload.signals_extra ?? null).toBeNull();
    // The turn ended once, and the session's seq is whole.
    expect(events.filter((e) => e.type === 'turn.completed' || e.type === 'turn.cancelled')).toHaveLength(1);
    expect(store.seqWhole(sessionId)).toBe(true);
  }, 120_000);
});
