import { rmSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';

// $1 an output token: "hi" is answered "You said: hi", three tokens, $3 a call.
const runtime = {
  pricing: { 'scripted:*': { input_per_mtok: 0, output_per_mtok: 1_000_000 } },
};
const ask = { model: 'scripted:demo', messages: [{ role: 'user' as const, content: 'hi' }] };

const rigs: GatewayRig[] = [];
afterAll(async () => {
  for (const rig of rigs) await rig.close(true);
  for (const rig of rigs) rmSync(rig.home, { recursive: true, force: true });
});

describe('gateway: spend caps', () => {
  it('alerts at 80 % and 100 %, then refuses with the SDK rate-limit error, one quota_exceeded, exact after a restart', async () => {
    const rig = await startGatewayRig({ runtime });
    rigs.push(rig);
    const key = rig.issue({ dailyUsd: '5', userId: 'usr_bob' });
    // The SDK's own retries stay on: the 429 tells it not to retry (x-should-retry: false).
    const client = new OpenAI({ apiKey: key.secret, baseURL: `${rig.url}/v1` });
    await client.chat.completions.create(ask); // $3: 60 %
    expect(await rig.storedOf('quota.alert')).toEqual([]);
    await client.chat.completions.create(ask); // $6: past 80 % and 100 %
    const alerts = (await rig.storedOf('quota.alert')).map((e) => e.payload);
    expect(alerts).toEqual([
      {
        scope: 'daily',
        threshold_pct: 80,
        spent_usd: '6',
        cap_usd: '5',
        gateway_key_id: key.id,
        user_id: 'usr_bob',
      },
      {
        scope: 'daily',
        threshold_pct: 100,
        spent_usd: '6',
        cap_usd: '5',
        gateway_key_id: key.id,
        user_id: 'usr_bob',
      },
    ]);
    const refused = await client.chat.completions.create(ask).catch((e) => e);
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const anthropic = new Anthropic({ apiKey: key.secret, baseURL: rig.url });
    const alsoRefused = await anthropic.messages.create({ ...ask, max_tokens: 10 }).catch((e) => e);
    expect(alsoRefused).toBeInstanceOf(Anthropic.RateLimitError);
    const exceeded = (await rig.storedOf('gateway.quota_exceeded')).map((e) => e.payload);
    expect(exceeded).toEqual([
      { gateway_key_id: key.id, window: 'daily', cap_usd: '5', spent_usd: '6', inbound_shape: 'openai' },
    ]);
    expect((await rig.storedOf('llm.call_completed')).length).toBe(2);

    // A restart counts the spend from the store: still over the cap, and no alert again.
    await rig.close(true);
    const again = await startGatewayRig({ runtime, home: rig.home });
    rigs.push(again);
    const after = await new OpenAI({
      apiKey: key.secret,
      baseURL: `${again.url}/v1`,
      maxRetries: 0,
    }).chat.completions
      .create(ask)
      .catch((e) => e);
    expect(after).toBeInstanceOf(OpenAI.RateLimitError);
    expect((await again.storedOf('quota.alert')).length).toBe(2);
  });

  it('caps a user over all their keys (gateway.users), with a monthly window', async () => {
    const rig = await startGatewayRig({ runtime, gateway: { users: { usr_carol: { monthly_usd: '4' } } } });
    rigs.push(rig);
    const first = rig.issue({ userId: 'usr_carol' });
    const second = rig.issue({ userId: 'usr_carol' });
    await new OpenAI({ apiKey: first.secret, baseURL: `${rig.url}/v1` }).chat.completions.create(ask); // $3: 75 %
    await new OpenAI({ apiKey: second.secret, baseURL: `${rig.url}/v1` }).chat.completions.create(ask); // $6
    const alerts = (await rig.storedOf('quota.alert')).map((e) => e.payload);
    expect(alerts.map((a) => [a.scope, a.threshold_pct, a.gateway_key_id, a.user_id])).toEqual([
      ['monthly', 80, null, 'usr_carol'],
      ['monthly', 100, null, 'usr_carol'],
    ]);
    const refused = await new OpenAI({ apiKey: first.secret, baseURL: `${rig.url}/v1` }).chat.completions
      .create(ask)
      .catch((e) => e);
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    expect(refused.message).toContain('monthly spend cap of its user');
  });
});
