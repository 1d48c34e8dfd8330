import { utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { startRuntime } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Issue 18 point 2: the routing rules from their own file, re-read while the runtime runs; a file that
 * does not load is reported with every error and the last good rules stay (bus §6.4).
 */

const POLL_MS = 20;

/**
 * Waits for an edit of `path` to be read. The file is polled by stat on libuv's thread pool: on a loaded
 * machine the watcher's first stat can land after the edit, which it then takes as the starting state, so
 * the file's mtime is moved on every second until the edit is seen (a user's later save would do the same).
 */
async function until(condition: () => boolean, what: string, path: string): Promise<void> {
  let touches = 0;
  const started = Date.now();
  await vi.waitFor(
    () => {
      if (condition()) return;
      if (Date.now() - started > (touches + 1) * 1_000) {
        touches += 1;
        const later = new Date(Date.now() + touches * 1_000);
        utimesSync(path, later, later);
      }
      throw new Error(`timed out waiting for ${what}`);
    },
    { timeout: 15_000, interval: 10 },
  );
}

function harness(initial: string, name = 'policy.yaml') {
  const path = join(tempDir(), name);
  writeFileSync(path, initial);
  const h = startRuntime({ routing_policy_file: path, routing_policy_poll_ms: POLL_MS });
  const session = h.runtime.createSession({ workspacePath: h.workspace });
  const chosenFor = async (message: string) => {
    const { turnId, done } = h.runtime.submitTurn(session.id, message);
    await h.settle(done);
    const decided = h.frames.find((e) => e.type === 'route.decided' && e.turn_id === turnId)!;
    return decided.payload.chosen_model as string;
  };
  const invalid = (): MetisEvent[] => h.frames.filter((e) => e.type === 'routing.policy_invalid', path);
  return { h, path, session, chosenFor, invalid };
}

describe('a routing policy file', () => {
  it('its rules route; an edit takes effect without a restart, and the version follows it', async () => {
    const { h, path, session, chosenFor } = harness(
      'rules:\n  - { name: code, match: "\\\\bcode\\\\b", model: "scripted:coder" }\n',
    );
    expect(await chosenFor('write some code')).toBe('scripted:coder');
    const before = h.runtime.getSession(session.id).routing_policy_version;
    writeFileSync(path, 'rules:\n  - { name: poems, match: poem, model: "scripted:poet" }\n');
    await until(() => h.runtime.routing.version !== before, 'the edit to be read', path);
    expect(await chosenFor('a poem please')).toBe('scripted:poet');
    expect(await chosenFor('write some code')).toBe('scripted:demo');
    expect(h.runtime.getSession(session.id).routing_policy_version).not.toBe(before);
  });

  it('a broken edit emits routing.policy_invalid with every error and keeps the last good rules', async () => {
    const { h, path, chosenFor, invalid } = harness(
      '[{ "name": "code", "match": "code", "model": "scripted:coder" }]',
      'policy.json',
    );
    const good = h.runtime.routing.version;
    writeFileSync(
      path,
      '{ "rules": [{ "name": "", "match": "code", "model": "coder" }, { "name": "x", "match": "(?=ahead)", "model": "scripted:x" }] }',
    );
    await until(() => invalid().length > 0, 'routing.policy_invalid', path);
    const [event] = invalid();
    expect(event).toMatchObject({
      session_id: 'system',
      actor: 'system',
      payload: { policy_path: path, using_last_known_good: true },
    });
    const errors = event!.payload.errors as string[];
    expect(errors.length).toBeGreaterThanOrEqual(3);
    expect(errors.join('\n')).toMatch(/rules\.0\.name/);
    expect(errors.join('\n')).toMatch(/rules\.0\.model/);
    expect(errors.join('\n')).toMatch(/rules\.1\.match/);
    expect(h.runtime.routing.version).toBe(good);
    expect(await chosenFor('more code')).toBe('scripted:coder');
    writeFileSync(path, '{ not json');
    await until(() => invalid().length > 1, 'the second routing.policy_invalid', path);
    expect(invalid()[1]!.payload.errors).toEqual([expect.stringContaining('is not valid JSON')]);
  });

  it('a file that does not load at start: the config rules apply, reported as no last known good', async () => {
    const { chosenFor, invalid } = harness('rules: [ { name: a } ]');
    expect(await chosenFor('hello')).toBe('scripted:demo');
    expect(invalid().map((e) => e.payload.using_last_known_good)).toEqual([false]);
    expect((invalid()[0]!.payload.errors as string[]).join('\n')).toMatch(/rules\.0\.match/);
  });

  it('a rule naming a model no provider serves, or a provider out of routing, is refused with the reason', async () => {
    const path = join(tempDir(), 'policy.yaml');
    writeFileSync(path, 'rules:\n  - { name: ok, match: ok, model: "scripted:fine" }\n');
    const h = startRuntime({
      routing_policy_file: path,
      routing_policy_poll_ms: POLL_MS,
      provider_health: { consecutive_failures: 1, cooldown_seconds: 60 },
    });
    const session = h.runtime.createSession({ workspacePath: h.workspace, model: 'scripted:broken' });
    await h.settle(h.runtime.submitTurn(session.id, 'fail: server_error').done);
    await h.context.flush();
    expect(h.frames.some((e) => e.type === 'routing.provider_unavailable')).toBe(true);
    const good = h.runtime.routing.version;
    writeFileSync(
      path,
      'rules:\n  - { name: a, match: a, model: "nope:model" }\n  - { name: b, match: b, model: "scripted:broken" }\n',
    );
    const invalid = () => h.frames.filter((e) => e.type === 'routing.policy_invalid', path);
    await until(() => invalid().length > 0, 'routing.policy_invalid', path);
    const errors = invalid()[0]!.payload.errors as string[];
    expect(errors).toEqual([
      expect.stringMatching(/^rules\.0\.model: "nope:model" cannot serve: no provider "nope" in the config/),
      expect.stringMatching(
        /^rules\.1\.model: "scripted:broken" names a provider out of routing: scripted:broken is unavailable/,
      ),
    ]);
    expect(h.runtime.routing.version).toBe(good);
  });
});
