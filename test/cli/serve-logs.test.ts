import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { logFormatFor } from '../../src/core/logger.js';
import { homeToken } from '../helpers/home-token.js';
import { jsonRequest } from '../helpers/http.js';
import { HAS_SCRIPT, metisInPty } from '../helpers/pty.js';
import { serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** A turn whose model call fails: the server logs a warning about it. */
async function failingTurn(url: string, token: string): Promise<void> {
  const session = await jsonRequest(url, 'POST', '/sessions', {}, { token });
  const turn = await jsonRequest(
    url,
    'POST',
    `/sessions/${session.body.session_id}/turns`,
    { message: 'fail: auth' },
    { token },
  );
  expect(turn.status).toBe(202);
}

describe('serve logs: readable on a terminal, JSON lines elsewhere (issue 17 obs. 7)', () => {
  it('picks the format from the stream, METIS_LOG_FORMAT overriding', () => {
    expect(logFormatFor({ isTTY: true }, {})).toBe('pretty');
    expect(logFormatFor({ isTTY: false }, {})).toBe('json');
    expect(logFormatFor({ isTTY: true }, { TERM: 'dumb' })).toBe('json');
    expect(logFormatFor({ isTTY: true }, { METIS_LOG_FORMAT: 'json' })).toBe('json');
    expect(logFormatFor({ isTTY: false }, { METIS_LOG_FORMAT: 'pretty' })).toBe('pretty');
  });

  it.skipIf(!HAS_SCRIPT)(
    'metis serve on a terminal prints "WARN … message", not JSON',
    async () => {
      const home = tempDir();
      const serve = metisInPty(['serve', '--port', '0', '--db', join(home, 'metis.db')], {
        METIS_HOME: home,
      });
      await serve.waitFor('Press Ctrl-C to stop.');
      const url = /metis serving on (http:\S+)/.exec(serve.screen())![1]!;
      await failingTurn(url, homeToken(home));
      await serve.waitFor(/WARN.*model call failed/);
      expect(serve.screen()).not.toContain('{"level"');
      serve.type('\u0003');
      expect(await serve.exited).toBe(0);
    },
    30_000,
  );

  it('metis serve into a pipe writes JSON lines', async () => {
    const home = tempDir();
    const server = await serveCli(home, ['--db', join(home, 'metis.db')]);
    await failingTurn(server.url, homeToken(home));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await server.stop('SIGTERM')).toBe(0);
    const logs = server
      .stderr()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(logs.length).toBeGreaterThan(0);
    for (const line of logs) expect(JSON.parse(line)).toHaveProperty('level');
  }, 30_000);
});
