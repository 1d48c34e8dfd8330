import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startService } from '../../src/core/app/start-service.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { issueKey } from '../../src/core/gateway/key-admin.js';
import { silentLogger } from '../../src/core/logger.js';
import { startClusterNode } from '../helpers/cluster.js';
import { natsTestsRun, startNats } from '../helpers/nats.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';

const server = postgresForFile();

/** `metis serve --store <url>` with its working copy in a folder of its own, the gateway on. */
async function serve(url: string, keystore: string) {
  const dir = tempDir();
  const config = MetisConfigSchema.parse({
    server: { port: 0, auth: 'none' },
    store: { url },
    runtime: { pricing: { 'scripted:*': { input_per_mtok: 0, output_per_mtok: 1_000_000 } } },
    gateway: { keystore },
  });
  const service = await startService(config, join(dir, 'metis.db'), silentLogger(), {
    tokenFile: join(dir, 'token'),
  });
  onTestFinished(() => service.stop());
  return service;
}

describe.skipIf(!postgresTestsRun)('gateway on a PostgreSQL store', () => {
  it('counts a key’s spend from PostgreSQL: a node with a new working copy still refuses a key over its cap', async () => {
    const url = freshDatabase(server);
    const keystore = join(tempDir(), 'gateway-keys.json');
    const { value } = issueKey(keystore, {
      name: 'pg app',
      workspacePath: tempDir(),
      models: null,
      dailyUsd: '5',
      monthlyUsd: null,
      userId: null,
      teamId: null,
    });
    const ask = { model: 'scripted:demo', messages: [{ role: 'user' as const, content: 'hi' }] };
    const first = await serve(url, keystore);
    const client = new OpenAI({ apiKey: value.secret, baseURL: `${first.url}/v1`, maxRetries: 0 });
    await client.chat.completions.create(ask); // $3
    await client.chat.completions.create(ask); // $6 of $5
    expect(await client.chat.completions.create(ask).catch((e) => e)).toBeInstanceOf(OpenAI.RateLimitError);
    await first.stop();

    // Another data folder: its working copy is built from PostgreSQL, the store of record.
    const second = await serve(url, keystore);
    const again = new OpenAI({ apiKey: value.secret, baseURL: `${second.url}/v1`, maxRetries: 0 });
    expect(await again.chat.completions.create(ask).catch((e) => e)).toBeInstanceOf(OpenAI.RateLimitError);
  });
});

describe.skipIf(!postgresTestsRun || !natsTestsRun)('gateway in a cluster on PostgreSQL', () => {
  it("counts every node's calls against one cap: a node refuses a key another node took over its cap", async () => {
    const nats = await startNats();
    onTestFinished(() => nats.destroy());
    const store = freshDatabase(server);
    const [homeA, homeB] = [tempDir(), tempDir()];
    // The scripted model's default price: "hi" costs about $0.000014 a call; two calls pass $0.00002.
    const { value } = issueKey(join(homeA, 'gateway-keys.json'), {
      name: 'cluster app',
      workspacePath: homeA,
      models: null,
      dailyUsd: '0.00002',
      monthlyUsd: null,
      userId: null,
      teamId: null,
    });
    copyFileSync(join(homeA, 'gateway-keys.json'), join(homeB, 'gateway-keys.json'));
    const a = await startClusterNode(store, nats.url, 'gw-a', { home: homeA });
    const b = await startClusterNode(store, nats.url, 'gw-b', { home: homeB });
    const ask = { model: 'scripted:demo', messages: [{ role: 'user' as const, content: 'hi' }] };
    const via = (url: string) => new OpenAI({ apiKey: value.secret, baseURL: `${url}/v1`, maxRetries: 0 });
    const first = await via(a.url).chat.completions.create(ask);
    // Priced $1 and $2 a million tokens: one call is under the cap, two are over it.
    const cost = (first.usage!.prompt_tokens * 1 + first.usage!.completion_tokens * 2) / 1e6;
    expect(cost).toBeLessThan(0.00002);
    expect(2 * cost).toBeGreaterThanOrEqual(0.00002);
    await via(b.url).chat.completions.create(ask); // the second, on the other node
    // Once PostgreSQL holds B's call, node A reads it at its next refresh (every second): A's next
    // request is refused, though A itself spent under the cap.
    const database = new URL(store).pathname.slice(1);
    const stored = () =>
      Number(
        server.psql(
          "SELECT count(*) FROM events WHERE type = 'llm.call_completed' AND payload_json LIKE '%gateway_key_id%gk_%'",
          database,
        ),
      );
    const deadline = Date.now() + 15_000;
    while (stored() < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
    expect(stored()).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 2_500)); // two refreshes
    const refused = await via(a.url)
      .chat.completions.create(ask)
      .catch((e) => e);
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
  }, 90_000);
});
