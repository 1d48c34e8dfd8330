import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { authHeaders } from '../helpers/home-token.js';
import { eventually } from '../helpers/protocol.js';
import { serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * A plugin that starts a promise nobody awaits, which rejects: a bug outside metis's reach. Node's
 * default for an unhandled rejection is to exit 1, so one careless handler would stop the server.
 */
const CARELESS_PLUGIN = `
export default {
  name: 'careless',
  create() {
    return {
      filter: { event_types: ['turn.started'] },
      fastPath: false,
      handle() {
        Promise.reject(new Error('careless plugin: nobody awaits this'));
      },
    };
  },
};
`;

describe('metis serve: the safety net under unhandled rejections (issue 12, observation 1)', () => {
  it('logs an unhandled rejection with its context and keeps serving', async () => {
    const home = tempDir();
    writeFileSync(join(home, 'careless.mjs'), CARELESS_PLUGIN);
    const configPath = join(home, 'metis.config.json');
    writeFileSync(configPath, JSON.stringify({ plugins: [['./careless.mjs', {}]] }));
    const server = await serveCli(home, ['--db', join(home, 'metis.db'), '--config', configPath]);
    const post = async (path: string, body: unknown) =>
      (await (
        await fetch(`${server.url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...authHeaders(home) },
          body: JSON.stringify(body),
        })
      ).json()) as Record<string, any>;
    const sessionId = (await post('/sessions', {})).session_id as string;
    for (const message of ['first', 'second']) {
      await post(`/sessions/${sessionId}/turns`, { message });
      expect(
        await eventually(() => server.stderr().includes('careless plugin: nobody awaits this'), 20_000),
      ).toBe(true);
    }
    const logged = server
      .stderr()
      .split('\n')
      .filter((line) => line.includes('"diagnostic":"unhandled_rejection"'));
    expect(logged.length).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(logged[0]!)).toMatchObject({
      level: 50,
      err: { message: 'careless plugin: nobody awaits this' },
    });
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    expect(await server.stop('SIGTERM')).toBe(0);
  }, 60_000);
});
