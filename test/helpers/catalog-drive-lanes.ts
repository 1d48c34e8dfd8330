import { writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import { STREAMING_TYPES } from '../../src/core/events/streaming.js';
import {
  type Drive,
  GATEWAY_MODEL,
  POLICY_BAD,
  POLICY_OK,
  UNSTEADY_MODEL,
  type WireEvent,
} from './catalog-drive.js';
import { subscribeOn, waitForType } from './protocol.js';
import { openClient } from './server.js';

/**
 * The lanes of the catalog-coverage run: each drives a few catalog types through one running server as
 * a user would (HTTP, the CLI, the real WebSocket and OpenAI clients), independent of the others, so they
 * run side by side. Each waits for the events it is about, so a lane that stops early names what it
 * waited for.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A type whose session is not the one driven (a sweep, a policy file, a provider) may land in `system`. */
async function untilIn(d: Drive, sessions: readonly string[], type: string): Promise<WireEvent> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    for (const sessionId of sessions) {
      const found = (await d.events(sessionId)).find((e) => e.type === type);
      if (found) return found;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${type} in ${sessions.join(', ')}`);
    await sleep(40);
  }
}

/** `session.resumed` on the planted session (written by an earlier process), whose hole the start-up scan reported. */
export async function resumedLane(d: Drive, plantedSession: string): Promise<void> {
  await d.untilType(plantedSession, 'bus.gap_detected');
  await d.turn(plantedSession, 'hello again');
  await d.untilType(plantedSession, 'session.resumed');
}

/** A turn whose tool call waits for approval, answered with `metis confirm`. */
async function approvedTurn(d: Drive, s: string, message: string, decision: 'allow' | 'deny'): Promise<void> {
  const turnId = await d.submit(s, message);
  const asked = await d.until(
    s,
    (e) => e.type === 'tool.confirmation_requested' && e.turn_id === turnId,
    `the approval of "${message}"`,
  );
  await d.cli(['confirm', s, asked.payload.confirmation_request_id, decision]);
  await d.ended(s, turnId, message);
}

/** Tools: a call, invalid input, approvals answered with `metis confirm` (one denied: it fails), two delegations. */
export async function toolsLane(d: Drive, workspace: string): Promise<void> {
  const s = await d.session(workspace);
  await d.turn(s, 'time');
  await d.turn(s, 'read: ');
  await approvedTurn(d, s, 'run: echo covered', 'allow');
  await approvedTurn(d, s, 'run: echo refused', 'deny');
  await d.turn(s, 'delegate: summarize the notes');
  await d.turn(s, 'delegate: fail: invalid_request');
  for (const type of ['tool.input_invalid', 'tool.failed', 'tool.confirmation_resolved', 'delegate.failed'])
    await d.untilType(s, type);
}

/** Skills and memory through `metis skills` and `metis memory`, and the scripted model's tools. */
export async function skillsAndMemoryLane(d: Drive, workspace: string): Promise<void> {
  const where = ['--workspace', workspace];
  await d.cli([
    'skills',
    'create',
    'greeter',
    '--description',
    'Greets the user by name',
    '--body',
    'Greet the user warmly, by name.',
    '--always',
    ...where,
  ]);
  const s = await d.session(workspace);
  await d.turn(s, 'skills? greet');
  await d.turn(s, 'skill: greeter');
  await d.cli(['skills', 'edit', 'greeter', '--description', 'Greets the user kindly', ...where]);
  await approvedTurn(d, s, 'remember: the user drinks tea', 'allow');
  await d.cli(['memory', 'clear', '--yes', ...where]);
  for (const type of ['skill.loaded', 'skill.search', 'memory.updated']) await d.untilType(s, type);
}

/** A model out of routing after three failures, degraded on the way, and back after its cool-down. */
export async function providerHealthLane(d: Drive, workspace: string): Promise<void> {
  const s = await d.session(workspace, UNSTEADY_MODEL);
  for (let i = 0; i < 3; i += 1) await d.turn(s, 'fail: server_error');
  await untilIn(d, [s, 'system'], 'routing.provider_unavailable');
  await untilIn(d, [s, 'system'], 'provider.degraded');
  await sleep(300);
  await d.turn(s, 'hello there');
  await untilIn(d, [s, 'system'], 'routing.provider_recovered');
}

/** A retry (implicit feedback), two ratings with `metis feedback`: one verdict completes, one fails. */
export async function feedbackLane(d: Drive, workspace: string): Promise<void> {
  const s = await d.session(workspace);
  const first = await d.turn(s, 'hello there');
  const retried = await d.turn(s, 'hello there');
  await d.untilType(s, 'feedback.implicit');
  await d.cli(['feedback', s, 'up', '--turn', retried]);
  await d.cli(['feedback', s, 'down', '--turn', first, '--comment', 'not what I asked']);
  await d.untilType(s, 'eval.completed');
  await d.untilType(s, 'eval.failed');
}

/** A broken routing policy file (reported, the last good rules kept), then the good one again. */
export async function policyLane(d: Drive, policyFile: string): Promise<void> {
  writeFileSync(policyFile, POLICY_BAD);
  await untilIn(d, ['system'], 'routing.policy_invalid');
  writeFileSync(policyFile, POLICY_OK);
}

/** `metis trace prune` beside the server: the server records the sweep it is handed. */
export async function pruneLane(d: Drive): Promise<void> {
  const pruned = await d.cli(['trace', 'prune', '--json'], { config: true });
  if (JSON.parse(pruned.stdout).handed_to_server_pid === null)
    throw new Error(`the prune did not find the running server: ${pruned.stdout}`);
  await untilIn(d, ['system'], 'trace.swept');
}

/** The streaming-only types, as a WebSocket client attached to a session sees them (never stored). */
export async function streamingLane(d: Drive, workspace: string): Promise<Set<string>> {
  const s = await d.session(workspace);
  const handshake = await d.request('GET', `/sessions/${s}`);
  const client = await openClient(handshake.body.ws_url as string);
  await subscribeOn(client, { filter: 'preset:full', since: null, snapshot: true });
  await d.submit(s, 'think: time');
  await waitForType(client, 'turn.completed', 1, 20_000);
  client.close();
  await client.closed;
  return new Set(
    client
      .events()
      .map((e: WireEvent) => e.type as string)
      .filter((t) => STREAMING_TYPES.has(t)),
  );
}

/**
 * Pattern routing in a workspace of its own (a fingerprint includes the workspace, so no other lane's
 * turns count): two failures on one model and two successes on another, each session ended (`metis end`)
 * and learned from; then a match, a recommendation deferred behind the rule and applied (`metis route
 * override`), another dismissed (`metis route dismiss`), each turn cancelled (`metis cancel`), and the
 * store cleared (`metis patterns clear`).
 */
export async function patternsLane(d: Drive, workspace: string): Promise<void> {
  const learn = async (model: string, message: string) => {
    const s = await d.session(workspace, model);
    await d.turn(s, message);
    await d.cli(['end', s]);
    await d.untilType(s, 'pattern.recorded');
  };
  await Promise.all([
    learn('scripted:demo', 'fail: invalid_request'),
    learn('scripted:demo', 'fail: invalid_request'),
    learn('scripted:smart', 'hello there'),
    learn('scripted:smart', 'hello there'),
  ]);
  const user = await d.session(workspace);
  const matched = await d.turn(user, 'good morning');
  await d.until(user, (e) => e.type === 'pattern.matched' && e.turn_id === matched, 'pattern.matched');

  const deferred = async (message: string, verb: 'override' | 'dismiss', type: string) => {
    const turnId = await d.submit(user, message);
    await d.until(
      user,
      (e) => e.type === 'route.decided' && e.turn_id === turnId,
      `route.decided of ${message}`,
    );
    await d.cli(['route', verb, user]);
    await d.until(user, (e) => e.type === type && e.turn_id === turnId, type);
    await d.cli(['cancel', user, turnId]);
    await d.ended(user, turnId, message);
  };
  await deferred('slow: tell me', 'override', 'route.overridden');
  await deferred('slow: again', 'dismiss', 'pattern.override_dismissed');
  await d.cli(['patterns', 'clear']);
  await untilIn(d, [user, 'system'], 'pattern.evicted');
}

/**
 * The gateway (issue 32): keys issued, rotated and revoked with `metis gateway`, the real OpenAI SDK
 * against /v1 with a key over its daily cap (quota.alert, gateway.quota_exceeded) and a wrong key
 * (gateway.auth_failed).
 */
export async function gatewayLane(d: Drive): Promise<void> {
  const issued = await d.cli(['gateway', 'issue-key', '--name', 'coverage', '--daily-usd', '5', '--json'], {
    config: true,
  });
  const { key, secret } = JSON.parse(issued.stdout) as { key: { id: string }; secret: string };
  const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${d.url}/v1`, maxRetries: 0 });
  const ask = { model: GATEWAY_MODEL, messages: [{ role: 'user' as const, content: 'hi' }] };
  // "You said: hi" is 3 output tokens, $3: the second call crosses 80 % and 100 % of $5, the third is refused.
  await client(secret).chat.completions.create(ask);
  await client(secret).chat.completions.create(ask);
  const refused = await client(secret)
    .chat.completions.create(ask)
    .catch((error: unknown) => error);
  if (!(refused instanceof OpenAI.RateLimitError)) throw new Error(`over its cap: ${String(refused)}`);
  const wrong = await client('mgw_wrong')
    .chat.completions.create(ask)
    .catch((error: unknown) => error);
  if (!(wrong instanceof OpenAI.AuthenticationError)) throw new Error(`a wrong key: ${String(wrong)}`);
  const rotated = await d.cli(['gateway', 'rotate-key', key.id, '--grace', '0', '--json'], { config: true });
  const successor = JSON.parse(rotated.stdout) as { key: { id: string } };
  await d.cli(['gateway', 'revoke-key', successor.key.id], { config: true });
}

/**
 * One user's data (bus §6.14): a key issued to a user, one request, then `metis user export` and
 * `metis user forget` of that user (analytics.user_exported, analytics.user_forgotten).
 */
export async function userDataLane(d: Drive): Promise<void> {
  const user = 'usr_coverage_forget';
  const issued = await d.cli(['gateway', 'issue-key', '--name', 'forgettable', '--user', user, '--json'], {
    config: true,
  });
  const { secret } = JSON.parse(issued.stdout) as { secret: string };
  const client = new OpenAI({ apiKey: secret, baseURL: `${d.url}/v1`, maxRetries: 0 });
  await client.chat.completions.create({
    model: GATEWAY_MODEL,
    messages: [{ role: 'user', content: 'forget me' }],
  });
  const exported = await d.cli(['user', 'export', user], { config: true });
  if (!exported.stdout.includes('llm.call_completed'))
    throw new Error(`metis user export: ${exported.stdout}`);
  await d.cli(['user', 'forget', user, '--yes'], { config: true });
}
