import { rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { RunningService } from '../../src/core/app/start-service.js';
import { jsonRequest } from '../helpers/http.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { serveOnStore } from '../helpers/serve-on-store.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 30 on a PostgreSQL store: the server reads its SQLite working copy, whose triggers keep the
 * session summaries, the text index and the usage rollup; a working copy rebuilt from the store gets
 * them again as the rows are copied in.
 */
const pg = postgresForFile();

const get = async (service: RunningService, path: string) => {
  const answer = await jsonRequest(service.url, 'GET', path, undefined, { token: service.auth.token });
  expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  return answer.body;
};

describe.skipIf(!postgresTestsRun)('the session list on PostgreSQL', () => {
  it('searches and summarises sessions, and a rebuilt working copy answers the same', async () => {
    const url = freshDatabase(pg);
    const dir = tempDir();
    let service = await serveOnStore(url, dir);
    const token = service.auth.token;
    const created = await jsonRequest(service.url, 'POST', '/sessions', {}, { token });
    const session = created.body.session_id as string;
    for (const message of ['the zebra question', 'fail: server_error']) {
      await jsonRequest(service.url, 'POST', `/sessions/${session}/turns`, { message }, { token });
      await service.runtime.currentTurn(session)?.done;
    }
    // The turn's end is stored by the trace writer just after the turn resolves: wait for it.
    let found = await get(service, '/sessions?q=zebra');
    for (let i = 0; i < 100 && found.sessions[0]?.last_turn_status !== 'failed'; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      found = await get(service, '/sessions?q=zebra');
    }
    expect(found.sessions.map((s: any) => s.id)).toEqual([session]);
    expect(found.sessions[0]).toMatchObject({
      title: 'the zebra question',
      turn_count: 2,
      last_turn_status: 'failed',
    });
    const usage = await get(service, '/stats/usage?bucket=day');
    const copyPath = service.dbPath;
    await service.stop();

    rmSync(copyPath);
    service = await serveOnStore(url, dir);
    const again = await get(service, '/sessions?q=zebra');
    expect(again.sessions.map(({ current_turn_id: _, ...s }: any) => s)).toEqual(
      found.sessions.map(({ current_turn_id: _, ...s }: any) => s),
    );
    expect((await get(service, '/stats/usage?bucket=day')).rows).toEqual(usage.rows);
    await service.stop();
  }, 120_000);
});
