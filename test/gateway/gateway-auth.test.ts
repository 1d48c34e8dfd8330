import { createHash } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { revokeKey, rotateKey } from '../../src/core/gateway/key-admin.js';
import { type GatewayRig, startGatewayRig } from './gateway-rig.js';

let rig: GatewayRig;

const ask = { model: 'scripted:demo', messages: [{ role: 'user' as const, content: 'hi' }] };

function openai(secret: string): OpenAI {
  return new OpenAI({ apiKey: secret, baseURL: `${rig.url}/v1`, maxRetries: 0 });
}

function anthropic(secret: string): Anthropic {
  return new Anthropic({ apiKey: secret, baseURL: rig.url, maxRetries: 0 });
}

function hashPrefix(secret: string): string {
  return createHash('sha256').update(secret).digest('hex').slice(0, 8);
}

describe('gateway: keys and the auth gate', () => {
  beforeAll(async () => {
    // The server has its own token: the gateway must not need it, and a gateway key must not pass for it.
    // Failures here come from one address: the slow-down (429 after 5) is put out of the way.
    rig = await startGatewayRig({
      bearerToken: 'server-token-0123456789abcdef',
      authThrottle: { maxFailures: 1000 },
    });
  });
  afterAll(() => rig.close());

  it('lets a gateway key in without the server token, and nowhere but /v1', async () => {
    const key = rig.issue();
    const answer = await openai(key.secret).chat.completions.create(ask);
    expect(answer.choices[0]!.message.content).toBe('You said: hi');
    const sessions = await fetch(`${rig.url}/sessions`, {
      headers: { authorization: `Bearer ${key.secret}` },
    });
    expect(sessions.status).toBe(401);
    // And the server token is no gateway key.
    const withToken = await openai('server-token-0123456789abcdef')
      .chat.completions.create(ask)
      .catch((e) => e);
    expect(withToken).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it('a wrong key gets the SDK auth error and one gateway.auth_failed with the hash prefix, never the key', async () => {
    const wrong = 'mgw_this-is-not-a-key-of-this-server-000000';
    const before = (await rig.storedOf('gateway.auth_failed')).length;
    const error = await openai(wrong)
      .chat.completions.create(ask)
      .catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    const again = await anthropic(wrong)
      .messages.create({ ...ask, max_tokens: 100 })
      .catch((e) => e);
    expect(again).toBeInstanceOf(Anthropic.AuthenticationError);
    const failed = (await rig.storedOf('gateway.auth_failed')).slice(before);
    // The same key from the same address twice within a minute: one event (throttled).
    expect(failed.map((e) => e.payload)).toEqual([
      {
        reason: 'invalid_token',
        inbound_shape: 'openai',
        token_hash_prefix: hashPrefix(wrong),
        gateway_key_id: null,
      },
    ]);
    const all = JSON.stringify(await rig.stored());
    expect(all).not.toContain(wrong);
  });

  it('a revoked key gets the auth error and gateway.auth_failed key_revoked naming the key', async () => {
    const key = rig.issue();
    await openai(key.secret).chat.completions.create(ask);
    revokeKey(rig.keystore, key.id);
    const error = await anthropic(key.secret)
      .messages.create({ ...ask, max_tokens: 100 })
      .catch((e) => e);
    expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
    const failed = (await rig.storedOf('gateway.auth_failed')).filter(
      (e) => e.payload.gateway_key_id === key.id,
    );
    expect(failed.map((e) => e.payload)).toEqual([
      {
        reason: 'key_revoked',
        inbound_shape: 'anthropic',
        token_hash_prefix: hashPrefix(key.secret),
        gateway_key_id: key.id,
      },
    ]);
  });

  it('a rotated key works during its grace period and is refused after it; the new key works', async () => {
    const key = rig.issue();
    const { value } = rotateKey(rig.keystore, key.id, 300);
    const during = await openai(key.secret).chat.completions.create(ask);
    expect(during.choices[0]!.message.content).toBe('You said: hi');
    await new Promise((resolve) => setTimeout(resolve, 400));
    const after = await openai(key.secret)
      .chat.completions.create(ask)
      .catch((e) => e);
    expect(after).toBeInstanceOf(OpenAI.AuthenticationError);
    const successor = await openai(value.secret).chat.completions.create(ask);
    expect(successor.choices[0]!.message.content).toBe('You said: hi');
    const failed = (await rig.storedOf('gateway.auth_failed')).filter(
      (e) => e.payload.gateway_key_id === key.id,
    );
    expect(failed.map((e) => e.payload.reason)).toEqual(['key_revoked']);
    const completed = (await rig.storedOf('llm.call_completed')).map((e) => e.payload.gateway_key_id);
    expect(completed).toContain(value.key.id);
  });

  it('a request without a key is refused as missing_token', async () => {
    const response = await fetch(`${rig.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(ask),
    });
    expect(response.status).toBe(401);
    expect(((await response.json()) as any).error.code).toBe('invalid_api_key');
    const failed = await rig.storedOf('gateway.auth_failed');
    expect(
      failed.some((e) => e.payload.reason === 'missing_token' && e.payload.token_hash_prefix === null),
    ).toBe(true);
  });
});
