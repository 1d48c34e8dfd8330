import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { freePort } from '../helpers/free-port.js';
import { type NatsServer, natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** `metis doctor` says whether the cluster `metis serve --nats` would join is ready, changing nothing. */

const pg = postgresForFile();

async function clusterCheck(env: Record<string, string>) {
  const result = await runCli(['doctor', '--json'], tempDir(), env);
  const report = JSON.parse(result.stdout) as { checks: { name: string; status: string; detail: string }[] };
  return { exitCode: result.exitCode, cluster: report.checks.find((check) => check.name === 'cluster') };
}

describe.skipIf(!postgresTestsRun || !natsTestsRun)('metis doctor in a cluster', () => {
  it('a broker that answers and a free name are ready; a name a live node has, and no broker, are problems', async () => {
    const nats: NatsServer = await startNats();
    try {
      const store = freshDatabase(pg);
      const env = { METIS_STORE_URL: store, METIS_NATS_URL: nats.url };
      const ready = await clusterCheck(env);
      expect(ready.cluster).toMatchObject({ status: 'ok' });
      expect(ready.cluster!.detail).toMatch(
        /broker nats:\/\/127\.0\.0\.1:\d+ answers \(\$METIS_NATS_URL\); node "[^"]+" is free; no node alive/,
      );

      const a = await serveCli(tempDir(), ['--store', store, '--nats', nats.url, '--node-id', 'node-a']);
      const named = await runCli(['doctor', '--json', '--config', writeConfig('node-a')], tempDir(), env);
      const report = JSON.parse(named.stdout) as {
        checks: { name: string; status: string; detail: string }[];
      };
      expect(named.exitCode).toBe(1);
      expect(report.checks.find((check) => check.name === 'cluster')).toMatchObject({
        status: 'problem',
        detail: expect.stringContaining(`node name "node-a" is taken: node-a (${a.url}`),
      });
      await a.stop('SIGTERM');

      const port = await freePort();
      const away = await clusterCheck({ ...env, METIS_NATS_URL: `nats://127.0.0.1:${port}` });
      expect(away.exitCode).toBe(1);
      expect(away.cluster).toMatchObject({
        status: 'problem',
        detail: expect.stringContaining(`cannot reach the NATS broker at nats://127.0.0.1:${port}`),
      });
    } finally {
      await nats.destroy();
    }
  });

  it('no cluster setting: no cluster line', async () => {
    const { cluster } = await clusterCheck({});
    expect(cluster).toBeUndefined();
  });
});

/** A config file naming this node, for the doctor to check the name. */
function writeConfig(nodeId: string): string {
  const path = join(tempDir(), 'metis.config.json');
  writeFileSync(path, JSON.stringify({ cluster: { node_id: nodeId } }));
  return path;
}
