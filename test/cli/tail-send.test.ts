import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { filterFrom } from '../../src/commands/tail.js';
import { PRESETS } from '../../src/core/events/presets.js';
import { STREAMING } from '../../src/core/events/streaming.js';
import { authHeaders } from '../helpers/home-token.js';
import { eventually } from '../helpers/protocol.js';
import { runCli, serveCli, spawnCli } from '../helpers/run-cli.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

const ID = /\b(evt|sess|turn|msg|tu|req|conf|conn|sub)_[0-9A-HJKMNP-TV-Z]{26}\b/g;

/** Replaces every id by `<prefix>_<n>`, numbered per prefix in order of first appearance. */
function normalizeIds(text: string): string {
  const names = new Map<string, string>();
  const counts = new Map<string, number>();
  return text.replace(ID, (id, prefix: string) => {
    let name = names.get(id);
    if (name === undefined) {
      const n = (counts.get(prefix) ?? 0) + 1;
      counts.set(prefix, n);
      name = `${prefix}_${n}`;
      names.set(id, name);
    }
    return name;
  });
}

const VOLATILE_KEYS: Record<string, string> = {
  timestamp: '<timestamp>',
  latency_ms: '<ms>',
  elapsed_ms: '<ms>',
  wall_time_seconds: '<seconds>',
  cost_usd: '<usd>',
  total_cost_usd: '<usd>',
  cost_so_far_usd: '<usd>',
  workspace_path: '<workspace>',
  routing_policy_version: '<hash>',
  pricing_version: '<pricing>',
};

/** A `tail --json` line with timestamps, durations, costs and paths replaced (ids are done after). */
function normalizeFrame(line: string): string {
  const frame = JSON.parse(line) as Frame;
  const fullTypes = JSON.stringify(PRESETS['preset:full']);
  const walk = (value: unknown, key?: string): unknown => {
    if (key !== undefined && key in VOLATILE_KEYS && value !== null) return VOLATILE_KEYS[key];
    if (key === 'event_types' && JSON.stringify(value) === fullTypes) return '<preset:full>';
    if (Array.isArray(value)) return value.map((v) => walk(v));
    if (value !== null && typeof value === 'object')
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, k)]));
    return value;
  };
  return JSON.stringify(walk(frame));
}

/** The human view with the server's port, durations and costs replaced (ids are done after). */
function normalizeHuman(text: string): string {
  return text
    .replace(/http:\/\/127\.0\.0\.1:\d+/g, 'http://127.0.0.1:<port>')
    .replace(/\(\d+ ms\)/g, '(<ms> ms)')
    .replace(/\$\d+(\.\d+)?/g, '$<usd>');
}

/** What the golden turn sends: it thinks, runs a command (deterministic output), and answers. */
const GOLDEN_MESSAGE = 'think: run: echo hello';

async function goldenTail(args: readonly string[], done: (stdout: string) => boolean): Promise<string> {
  const t = await startTestServer();
  const sessionId = await t.createSession();
  const tail = spawnCli(['tail', sessionId, '--url', t.url, ...args], tempDir());
  // Subscribed once the snapshot is out (both views print it).
  await tail.waitForStdout(
    (out) => out.includes('"type":"snapshot"') || out.includes(`session ${sessionId}:`),
  );
  await t.submit(sessionId, GOLDEN_MESSAGE);
  await tail.waitForStdout(done);
  // Ctrl-C stops the tail, and only the tail (exit code 0).
  expect(await tail.stop('SIGINT')).toBe(0);
  return tail.stdout();
}

describe('metis tail: golden output', () => {
  it('--json prints one frame per line', async () => {
    const stdout = await goldenTail(['--json', '--preset', 'full'], (out) =>
      out.includes('"type":"turn.completed"'),
    );
    const lines = stdout.trimEnd().split('\n');
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(lines.map((l) => JSON.parse(l).type).slice(0, 2)).toEqual(['subscribe_ack', 'snapshot']);
    // The frames rebuild the turn exactly.
    const state = lines.map((l) => JSON.parse(l) as Frame).reduce(reduce, initialState);
    expect(state.mismatches).toBe(0);
    expect(Object.values(state.turns).map((t) => t.status)).toEqual(['completed']);
    const normalized = normalizeIds(lines.map(normalizeFrame).join('\n'));
    await expect(`${normalized}\n`).toMatchFileSnapshot('./__golden__/tail-json.jsonl');
  }, 60_000);

  it('the human view with NO_COLOR=1: streamed text, thinking, the tool line, the turn summary', async () => {
    const stdout = await goldenTail([], (out) => out.includes('■ turn done'));
    expect(stdout.includes('\u001b[')).toBe(false); // no colour codes
    expect(stdout).toContain('(thinking) The user asks: run: echo hello. I will use shell.\nRunning it.\n');
    const normalized = normalizeIds(normalizeHuman(stdout));
    await expect(normalized).toMatchFileSnapshot('./__golden__/tail-human.txt');
  }, 60_000);
});

describe('metis tail: filter and Ctrl-C', () => {
  it('--preset, --workers and --types become the subscribe filter', () => {
    expect(filterFrom({})).toBe('preset:chat');
    expect(filterFrom({ preset: 'full' })).toBe('preset:full');
    // --workers keeps the preset's types (a preset string cannot carry include_worker_sessions).
    expect(filterFrom({ workers: true })).toEqual({
      event_types: [...PRESETS['preset:chat']],
      actors: null,
      include_worker_sessions: true,
    });
    expect(filterFrom({ preset: 'full', workers: true })).toMatchObject({
      event_types: [...PRESETS['preset:full']],
      include_worker_sessions: true,
    });
    expect(filterFrom({ types: 'text.delta, turn.completed', workers: true })).toEqual({
      event_types: ['text.delta', 'turn.completed'],
      actors: null,
      include_worker_sessions: true,
    });
    expect(() => filterFrom({ types: 'text.delta,made.up.thing' })).toThrow(/made\.up\.thing/);
    expect(() => filterFrom({ preset: 'everything' })).toThrow(/--preset/);
    // Both, or a list with nothing in it, would leave the user guessing what is followed.
    expect(() => filterFrom({ preset: 'full', types: 'turn.started' })).toThrow(
      /^--types and --preset: give one or the other$/,
    );
    expect(() => filterFrom({ types: ' , ' })).toThrow(/^--types: no event types given/);
  });

  it('Ctrl-C stops the tail and never cancels the turn it was watching', async () => {
    const t = await startTestServer({ scripted: { slow_token_delay_ms: 10, slow_tokens: 60 } });
    const sessionId = await t.createSession();
    const tail = spawnCli(['tail', sessionId, '--url', t.url], tempDir());
    await tail.waitForStdout((out) => out.includes(`session ${sessionId}:`));
    const turnId = await t.submit(sessionId, 'slow: a walk');
    await tail.waitForStdout((out) => out.includes('word3'));
    expect(await tail.stop('SIGINT')).toBe(0);
    expect(tail.stdout()).not.toContain('turn done');
    await t.runtime.currentTurn(sessionId)?.done;
    await t.context.flush();
    const ends = t.context.db
      .prepare("SELECT type FROM events WHERE turn_id = ? AND type IN ('turn.completed', 'turn.cancelled')")
      .pluck()
      .all(turnId);
    expect(ends).toEqual(['turn.completed']);
  }, 60_000);
});

describe('metis send and tail against a real `metis serve` (end to end)', () => {
  it('send --new "hello" --follow prints the scripted answer', async () => {
    const home = tempDir();
    const server = await serveCli(home, ['--db', join(home, 'metis.db')]);
    const result = await runCli(['send', '--new', 'hello', '--follow', '--url', server.url], home);
    expect(result.stderr).toMatch(/^created session sess_\w+$/m);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain('assistant: You said: hello\n');
    expect(result.stdout).toMatch(/■ turn done: 1 model call, 0 tools/);
    expect(await server.stop('SIGTERM')).toBe(0);
  }, 60_000);

  it('tail --json survives a server restart and loses no event', async () => {
    const home = tempDir();
    const dbPath = join(home, 'metis.db');
    const first = await serveCli(home, ['--db', dbPath]);
    const post = async (url: string, path: string, body: unknown) =>
      (await (
        await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...authHeaders(home) },
          body: JSON.stringify(body),
        })
      ).json()) as Record<string, any>;
    const sessionId = (await post(first.url, '/sessions', {})).session_id as string;
    const tail = spawnCli(['tail', sessionId, '--json', '--preset', 'full', '--url', first.url], home);
    await tail.waitForStdout((out) => out.includes('"type":"snapshot"'));
    const frames = () =>
      tail
        .stdout()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Frame);
    const events = () => frames().flatMap((f) => (f.type === 'event' ? [f.event] : []));
    const ended = (turnId: string) => () =>
      events().some((e) => e.type === 'turn.completed' && e.turn_id === turnId);

    const turn1 = (await post(first.url, `/sessions/${sessionId}/turns`, { message: 'before the restart' }))
      .turn_id as string;
    expect(await eventually(ended(turn1), 20_000)).toBe(true);
    expect(await first.stop('SIGTERM')).toBe(0);

    const second = await serveCli(home, ['--db', dbPath], first.port);
    expect(second.port).toBe(first.port);
    // Submitted at once: the tail is probably still reconnecting and gets this turn by replay.
    const turn2 = (await post(second.url, `/sessions/${sessionId}/turns`, { message: 'after the restart' }))
      .turn_id as string;
    expect(await eventually(ended(turn2), 20_000)).toBe(true);

    // What the store holds for the session after the tail's snapshot, the tail has, once each.
    const snapshotAt = frames().find((f) => f.type === 'snapshot')!.snapshot_at_event_id as string;
    const db = new Database(dbPath, { readonly: true });
    onTestFinished(() => {
      db.close();
    });
    const stored = () =>
      db
        .prepare('SELECT id FROM events WHERE session_id = ? AND id > ? ORDER BY id')
        .pluck()
        .all(sessionId, snapshotAt) as string[];
    const persisted = () => events().filter((e) => !STREAMING.has(e.type));
    expect(await eventually(() => persisted().length >= stored().length, 10_000)).toBe(true);
    expect(await tail.stop('SIGINT')).toBe(0);
    expect(await second.stop('SIGTERM')).toBe(0);

    const ids = events().map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    const storedIds = stored();
    expect(persisted().map((e) => e.id)).toEqual(storedIds.filter((id) => id <= ids.at(-1)!));
    // Stopping the second server may have stored more after the tail stopped; nothing before that.
    expect(storedIds.filter((id) => id > ids.at(-1)!).every((id) => id > persisted().at(-1)!.id)).toBe(true);
    // The streaming ones: every message of both turns, rebuilt exactly from its deltas.
    const state = frames().reduce(reduce, initialState);
    expect(state.mismatches).toBe(0);
    expect(state.messages.map((m) => [m.status, m.blocks])).toEqual([
      ['complete', [{ type: 'text', text: 'You said: before the restart' }]],
      ['complete', [{ type: 'text', text: 'You said: after the restart' }]],
    ]);
    const streamingOf = (turnId: string) =>
      events().filter((e) => STREAMING.has(e.type) && e.turn_id === turnId);
    for (const turnId of [turn1, turn2]) {
      const types = streamingOf(turnId).map((e) => e.type);
      expect(types[0]).toBe('message.start');
      expect(types.at(-1)).toBe('message.complete');
    }
    // The tail said it was reconnecting (stderr carries the status lines in --json mode).
    expect(tail.stderr()).toContain('"status":"reconnecting"');
    expect(tail.stderr().match(/"status":"connected"/g)).toHaveLength(2);
  }, 90_000);
});

describe('metis tail: seq holes', () => {
  it('tail --preset full --workers reports the hole a drop-at-seam server makes (stderr, with --json)', async () => {
    const home = tempDir();
    const dbPath = join(home, 'metis.db');
    const server = spawnCli(
      ['serve', '--port', '0', '--json', '--db', dbPath, '--conformance', '--fault', 'drop-at-seam'],
      home,
    );
    await server.waitForStdout((out) => out.includes('\n'));
    const { url } = JSON.parse(server.stdout().split('\n')[0]!) as { url: string };
    const post = async (path: string, body: unknown) =>
      (await (
        await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...authHeaders(home) },
          body: JSON.stringify(body),
        })
      ).json()) as Record<string, any>;
    const db = new Database(dbPath, { readonly: true });
    onTestFinished(() => {
      db.close();
    });
    const stored = (sessionId: string) =>
      db.prepare('SELECT id, seq, type FROM events WHERE session_id = ? ORDER BY id').all(sessionId) as {
        id: string;
        seq: number;
        type: string;
      }[];
    const sessionId = (await post('/sessions', {})).session_id as string;
    // A first turn, so the tail's replay tells it a seq before the first live event (the one dropped).
    const turn1 = (await post(`/sessions/${sessionId}/turns`, { message: 'one' })).turn_id as string;
    expect(await eventually(() => stored(sessionId).some((e) => e.type === 'turn.completed'), 20_000)).toBe(
      true,
    );
    expect(turn1).toMatch(/^turn_/);
    const firstId = stored(sessionId)[0]!.id;

    const tail = spawnCli(
      ['tail', sessionId, '--preset', 'full', '--workers', '--since', firstId, '--json', '--url', url],
      home,
    );
    await eventually(() => tail.stderr().includes('"status":"connected"'), 20_000);
    const turn2 = (await post(`/sessions/${sessionId}/turns`, { message: 'two' })).turn_id as string;
    await tail.waitForStdout((out) => out.includes('"type":"turn.completed"') && out.includes(turn2));
    expect(await tail.stop('SIGINT')).toBe(0);
    expect(await server.stop('SIGTERM')).toBe(0);

    const received = new Set(
      tail
        .stdout()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Frame)
        .flatMap((f) => (f.type === 'event' && f.event.seq !== null ? [f.event.seq as number] : [])),
    );
    const missing = stored(sessionId)
      .map((e) => e.seq)
      .filter((seq) => seq > 1 && seq < Math.max(...received) && !received.has(seq));
    expect(missing).toHaveLength(1);
    const gaps = tail
      .stderr()
      .split('\n')
      .filter((l) => l.includes('"kind":"gap"'))
      .map((l) => JSON.parse(l));
    expect(gaps).toEqual([
      { kind: 'gap', session_id: sessionId, after_seq: missing[0]! - 1, next_seq: missing[0]! + 1 },
    ]);
  }, 60_000);
});

describe('metis tail: a confirmation waiting when it attaches', () => {
  it('it follows the snapshot as its event: tail prints the request id and the confirm command; metis confirm answers it', async () => {
    const t = await startTestServer({
      tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' },
    });
    const sessionId = await t.createSession();
    const turnId = await t.submit(sessionId, 'run: echo hi');
    expect(await eventually(() => t.runtime.confirmations.pendingIn(sessionId).length === 1, 20_000)).toBe(
      true,
    );
    const [requestId] = t.runtime.confirmations.pendingIn(sessionId);
    // Wait until the request is in the store: a snapshot covers only events already released.
    await t.context.flush();
    const attached = await t.attach(sessionId);
    attached.send({ type: 'subscribe', filter: 'preset:chat', since: null, snapshot: true });
    const snapshot = await attached.waitFor((f) => f.type === 'snapshot');
    expect(snapshot.session.current_turn_id).toBe(turnId);
    const requested = await attached.waitFor(
      (f) => f.type === 'event' && f.event.type === 'tool.confirmation_requested',
    );
    expect(requested.event.payload).toMatchObject({ confirmation_request_id: requestId, tool_name: 'shell' });

    const home = tempDir();
    const tail = spawnCli(['tail', sessionId, '--url', t.url], home);
    const command = `metis confirm ${sessionId} ${requestId} allow|deny`;
    await tail.waitForStdout((out) => out.includes(command));
    expect(tail.stdout()).toContain(`session ${sessionId}:`);
    expect(tail.stdout()).toMatch(/\? waiting for approval: confirm shell: .*echo hi/);
    expect(tail.stdout().includes('\u001b[')).toBe(false);

    const confirm = await runCli(['confirm', sessionId, requestId!, 'allow', '--url', t.url], home);
    expect(confirm.stderr).toBe('');
    expect(confirm.exitCode).toBe(0);
    // It prints the whole input it answers for, then the decision.
    expect(confirm.stdout).toContain('    echo hi\n');
    expect(confirm.stdout.endsWith(`${requestId}: allow`)).toBe(true);
    await tail.waitForStdout((out) => out.includes('■ turn done'));
    const after = tail.stdout().slice(tail.stdout().indexOf(command));
    expect(after).toContain('confirmation allow\n');
    expect(after).toMatch(/✓ shell ok/);
    expect(after).toMatch(/■ turn done: 2 model calls, 1 tool/);
    expect(await tail.stop('SIGINT')).toBe(0);
  }, 60_000);
});
