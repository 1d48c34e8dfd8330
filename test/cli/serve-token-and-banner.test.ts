import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, spawnCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 13 observations 4 and 7, as a user meets them on `metis serve`. */
describe('metis serve: a token from the environment and the --conformance banner', () => {
  it.each(['METIS_BEARER_TOKEN', 'METIS_TOKEN'])(
    'refuses a weak %s (the config rule, 16 characters) before it starts anything',
    async (name) => {
      const home = tempDir('metis-home-');
      const dbPath = join(home, 'metis.db');
      const result = await runCli(['serve', '--port', '0', '--host', '0.0.0.0', '--db', dbPath], home, {
        [name]: 'abc',
      });
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toContain(`${name}: must be at least 16 characters (it has 3)`);
      expect(result.stderr).not.toMatch(/\n\s+at /); // no stack trace
      expect(existsSync(dbPath)).toBe(false);
      expect(existsSync(`${dbPath}.lock`)).toBe(false);
    },
  );

  it('requires a long METIS_TOKEN on every request once it is set', async () => {
    const home = tempDir('metis-home-');
    const token = 'a-long-enough-random-token-0123456789';
    const server = spawnCli(['serve', '--port', '0', '--json', '--db', join(home, 'metis.db')], home, {
      METIS_TOKEN: token,
    });
    await server.waitForStdout((out) => out.includes('\n'), 30_000);
    const { url } = JSON.parse(server.stdout().split('\n')[0]!) as { url: string };
    expect((await fetch(`${url}/sessions`)).status).toBe(401);
    const allowed = await fetch(`${url}/sessions`, { headers: { authorization: `Bearer ${token}` } });
    expect(allowed.status).toBe(200);
    expect(await server.stop('SIGTERM')).toBe(0);
  });

  it('says in its banner what --conformance turns off, on the terminal and in --json', async () => {
    const home = tempDir('metis-home-');
    const human = spawnCli(['serve', '--port', '0', '--conformance', '--db', join(home, 'a.db')], home);
    await human.waitForStdout((out) => out.includes('Press Ctrl-C'), 30_000);
    expect(human.stdout()).toMatch(/WARNING\s+--conformance: tools run WITHOUT confirmation/);
    expect(await human.stop('SIGTERM')).toBe(0);

    const json = spawnCli(
      ['serve', '--port', '0', '--json', '--conformance', '--db', join(home, 'b.db')],
      home,
    );
    await json.waitForStdout((out) => out.includes('\n'), 30_000);
    const banner = JSON.parse(json.stdout().split('\n')[0]!) as { warning?: string };
    expect(banner.warning).toMatch(/^--conformance: tools run WITHOUT confirmation/);
    expect(await json.stop('SIGTERM')).toBe(0);

    // Without the flag there is no warning.
    const plain = spawnCli(['serve', '--port', '0', '--json', '--db', join(home, 'c.db')], home);
    await plain.waitForStdout((out) => out.includes('\n'), 30_000);
    expect(JSON.parse(plain.stdout().split('\n')[0]!)).not.toHaveProperty('warning');
    expect(await plain.stop('SIGTERM')).toBe(0);
  });
});
