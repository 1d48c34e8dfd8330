import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, onTestFinished } from 'vitest';
import { CATALOG } from '../../src/core/events/catalog/index.js';
import { eventually } from '../helpers/protocol.js';
import { runCli, serveCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 33 (memory): `metis memory show|clear`, real child processes against a real `metis serve`. */

function workspaceWith(files: Record<string, string>): string {
  const workspace = tempDir('metis-ws-');
  mkdirSync(join(workspace, '.metis'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(workspace, '.metis', name), text);
  return workspace;
}

function configIn(home: string, maxBytes: number): string {
  const path = join(home, 'metis.config.json');
  writeFileSync(path, JSON.stringify({ runtime: { memory: { max_bytes: maxBytes } } }));
  return path;
}

describe('metis memory', () => {
  it('show prints the entries; clear needs --yes, empties the file and records memory.eviction manual', async () => {
    const home = tempDir();
    const config = configIn(home, 2048);
    const workspace = workspaceWith({
      'MEMORY.md': '# Memory\n\nmy own notes\n\n- uses pnpm\n- tests run with vitest\n  (never jest)\n',
      'USER.md': '# User\n\n- likes tea\n',
    });

    const shown = await runCli(
      ['memory', 'show', '--workspace', workspace, '--config', config, '--json'],
      home,
    );
    expect(shown.exitCode, shown.stderr).toBe(0);
    const body = JSON.parse(shown.stdout);
    expect(body.max_bytes).toBe(2048);
    expect(body.files.map((f: any) => [f.file, f.entries])).toEqual([
      ['MEMORY.md', ['uses pnpm', 'tests run with vitest\n(never jest)']],
      ['USER.md', ['likes tea']],
    ]);
    const text = await runCli(['memory', 'show', '--workspace', workspace, '--config', config], home);
    expect(text.stdout).toContain('  - uses pnpm');
    expect(text.stdout).toContain('USER.md');

    const dbPath = join(home, 'metis.db');
    const server = await serveCli(home, ['--db', dbPath, '--config', config]);
    onTestFinished(async () => {
      expect(await server.stop('SIGTERM')).toBe(0);
    });

    const refused = await runCli(['memory', 'clear', '--workspace', workspace, '--url', server.url], home);
    expect(refused.exitCode).toBe(2);
    expect(refused.stderr).toContain('--yes');
    expect(readFileSync(join(workspace, '.metis', 'MEMORY.md'), 'utf8')).toContain('- uses pnpm');

    const cleared = await runCli(
      ['memory', 'clear', '--workspace', workspace, '--file', 'memory', '--yes', '--url', server.url],
      home,
    );
    expect(cleared.exitCode, cleared.stderr).toBe(0);
    expect(cleared.stdout).toContain('MEMORY.md cleared: 2 entries removed');
    // The entries went; the preamble the user wrote stayed; USER.md was not asked about.
    expect(readFileSync(join(workspace, '.metis', 'MEMORY.md'), 'utf8')).toBe('# Memory\n\nmy own notes\n');
    expect(readFileSync(join(workspace, '.metis', 'USER.md'), 'utf8')).toBe('# User\n\n- likes tea\n');

    const db = new Database(dbPath, { readonly: true });
    onTestFinished(() => {
      db.close();
    });
    const rows = () =>
      db.prepare("SELECT * FROM events WHERE type = 'memory.eviction'").all() as Record<string, any>[];
    expect(await eventually(() => rows().length === 1, 10_000)).toBe(true);
    const row = rows()[0]!;
    const payload = JSON.parse(row.payload_json);
    expect(payload).toEqual({
      file: 'MEMORY.md',
      trigger: 'manual',
      entries_evicted: 2,
      size_before_bytes: Buffer.byteLength(
        '# Memory\n\nmy own notes\n\n- uses pnpm\n- tests run with vitest\n  (never jest)\n',
      ),
      size_after_bytes: Buffer.byteLength('# Memory\n\nmy own notes\n'),
    });
    const entry = CATALOG.get('memory.eviction')!;
    expect(entry.schema.safeParse(payload).success).toBe(true);
    expect(row.sensitivity).toBe(entry.sensitivity);
    expect(row.actor).toBe('system');
    expect(row.session_id).toBe('system');
  });

  it('show names the file that is over the cap or malformed', async () => {
    const home = tempDir();
    const config = configIn(home, 256);
    const big = workspaceWith({ 'MEMORY.md': `# Memory\n\n${'- entry\n'.repeat(60)}` });
    const over = await runCli(['memory', 'show', '--workspace', big, '--config', config], home);
    expect(over.exitCode).toBe(2);
    expect(over.stderr).toContain(join(big, '.metis', 'MEMORY.md'));
    expect(over.stderr).toContain('over the cap of 256');

    const bad = workspaceWith({ 'USER.md': '# User\n\n- likes tea\nlikes coffee too\n' });
    const malformed = await runCli(['memory', 'show', '--workspace', bad, '--config', config], home);
    expect(malformed.exitCode).toBe(2);
    expect(malformed.stderr).toContain(join(bad, '.metis', 'USER.md'));
    expect(malformed.stderr).toContain('line 4 is not an entry');
  });
});
