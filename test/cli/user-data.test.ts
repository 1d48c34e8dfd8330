import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { CATALOG } from '../../src/core/events/catalog/index.js';
import { openDatabase } from '../../src/core/store/database.js';
import { eventually } from '../helpers/protocol.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * One user's data (bus §6.14 analytics): `metis user export` and `metis user forget` beside a running
 * server, on the sessions a gateway key with `--user` made. Real `metis serve`, CLI and openai SDK.
 */

function systemEvents(dbPath: string, type: string): any[] {
  const db = openDatabase(dbPath, { readonly: true });
  try {
    return (
      db
        .prepare(
          "SELECT payload_json, actor, sensitivity, parent_event_id FROM events WHERE session_id = 'system' AND type = ?",
        )
        .all(type) as {
        payload_json: string;
        actor: string;
        sensitivity: string;
        parent_event_id: string | null;
      }[]
    ).map((row) => ({ ...row, payload: JSON.parse(row.payload_json) }));
  } finally {
    db.close();
  }
}

function count(dbPath: string, sql: string, ...params: unknown[]): number {
  const db = openDatabase(dbPath, { readonly: true });
  try {
    return db
      .prepare(sql)
      .pluck()
      .get(...params) as number;
  } finally {
    db.close();
  }
}

describe('metis user export|forget', () => {
  it("exports one user's events, then forgets them beside a running server; other users' data stays", async () => {
    const home = tempDir('metis-user-');
    const config = join(home, 'metis.config.json');
    writeFileSync(config, JSON.stringify({ server: { auth: 'none' } }));
    const dbPath = join(home, 'metis.db');
    const withConfig = ['--config', config, '--db', dbPath];
    const server = await serveCli(home, withConfig);
    const keyOf = async (user: string) => {
      const issued = await runCli(
        ['gateway', 'issue-key', '--name', user, '--user', user, '--json', ...withConfig],
        home,
      );
      expect(issued.exitCode, issued.stderr).toBe(0);
      return JSON.parse(issued.stdout).secret as string;
    };
    const ask = async (secret: string, text: string) => {
      const client = new OpenAI({ apiKey: secret, baseURL: `${server.url}/v1`, maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: 'scripted:demo',
        messages: [{ role: 'user', content: text }],
      });
      expect(answer.choices[0]!.message.content).toBe(`You said: ${text}`);
    };
    await ask(await keyOf('usr_alice'), 'alice secret plans');
    await ask(await keyOf('usr_bob'), 'bob keeps this');
    const aliceSessions = () =>
      count(
        dbPath,
        "SELECT count(DISTINCT session_id) FROM events WHERE type = 'llm.call_completed' AND json_extract(payload_json, '$.user_id') = 'usr_alice'",
      );
    expect(await eventually(() => aliceSessions() === 1, 10_000)).toBe(true);

    // Export: to a new file, mode 0600, every event of alice's session and none of bob's.
    const out = join(home, 'alice.jsonl');
    const exported = await runCli(['user', 'export', 'usr_alice', '--out', out, ...withConfig], home);
    expect(exported.exitCode, exported.stderr).toBe(0);
    expect(statSync(out).mode & 0o777).toBe(0o600);
    const lines = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines.map((e) => e.type)).toEqual(
      expect.arrayContaining(['session.created', 'turn.started', 'llm.call_completed']),
    );
    expect(lines.some((e) => e.payload.user_id === 'usr_bob')).toBe(false);
    expect(await eventually(() => systemEvents(dbPath, 'analytics.user_exported').length === 1, 10_000)).toBe(
      true,
    );
    const [exportedEvent] = systemEvents(dbPath, 'analytics.user_exported');
    expect(exportedEvent.payload).toMatchObject({
      user_id: 'usr_alice',
      exported_event_count: lines.length,
      format: 'jsonl',
    });
    expect(CATALOG.get('analytics.user_exported')!.schema.safeParse(exportedEvent.payload).success).toBe(
      true,
    );
    expect(exportedEvent).toMatchObject({
      actor: 'system',
      sensitivity: 'pseudonymous',
      parent_event_id: null,
    });
    // An existing file is never overwritten; a bad user id is named.
    expect(
      (await runCli(['user', 'export', 'usr_alice', '--out', out, ...withConfig], home)).exitCode,
    ).not.toBe(0);
    const bad = await runCli(['user', 'export', 'usr alice', ...withConfig], home);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain('<user_id>');

    // Forget: refused without --yes; then alice's events (audit types kept), messages and tool calls go.
    const unconfirmed = await runCli(['user', 'forget', 'usr_alice', ...withConfig], home);
    expect(unconfirmed.exitCode).toBe(2);
    expect(unconfirmed.stderr).toContain('--yes');
    const messagesBefore = count(dbPath, 'SELECT count(*) FROM messages');
    const forgot = await runCli(['user', 'forget', 'usr_alice', '--yes', '--json', ...withConfig], home);
    expect(forgot.exitCode, forgot.stderr).toBe(0);
    const result = JSON.parse(forgot.stdout);
    expect(result.sessions).toBe(1);
    expect(result.events_deleted).toBeGreaterThan(3);
    expect(result.messages_deleted).toBeGreaterThan(0);
    expect(count(dbPath, 'SELECT count(*) FROM messages')).toBe(messagesBefore - result.messages_deleted);
    expect(aliceSessions()).toBe(0);
    expect(count(dbPath, "SELECT count(*) FROM messages WHERE content_json LIKE '%alice secret%'")).toBe(0);
    expect(
      count(dbPath, "SELECT count(*) FROM messages WHERE content_json LIKE '%bob keeps%'"),
    ).toBeGreaterThan(0);
    // The server's search no longer finds her words; bob's are still found.
    const search = async (q: string) =>
      (
        (await (await fetch(`${server.url}/sessions?q=${encodeURIComponent(q)}`)).json()) as {
          sessions: unknown[];
        }
      ).sessions.length;
    expect(await search('alice')).toBe(0);
    expect(await search('bob')).toBe(1);
    expect(
      await eventually(() => systemEvents(dbPath, 'analytics.user_forgotten').length === 1, 10_000),
    ).toBe(true);
    const [forgotten] = systemEvents(dbPath, 'analytics.user_forgotten');
    expect(forgotten.payload).toMatchObject({ user_id: 'usr_alice', events_deleted: result.events_deleted });
    expect(CATALOG.get('analytics.user_forgotten')!.schema.safeParse(forgotten.payload).success).toBe(true);
    expect(server.stderr()).not.toContain('gap');
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(existsSync(dbPath)).toBe(true);
  }, 60_000);
});
