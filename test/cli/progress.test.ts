import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { insertOldEvents } from '../helpers/old-events.js';
import { HAS_SCRIPT, metisInPty } from '../helpers/pty.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';

/**
 * Issue 17: long store work shows clack's progress bar or spinner on a terminal, and ends with what it
 * did; in a pipe stderr stays free of it, so scripts read only the result.
 */

const OLD_EVENTS = 5_000;

/** A closed database holding OLD_EVENTS events 120 days old. */
async function oldDatabase(): Promise<string> {
  const context = tempTraceContext();
  insertOldEvents(context.db, { sessionId: 'sess_old', ageDays: 120, count: OLD_EVENTS });
  await context.close();
  return context.dbPath;
}

describe.skipIf(!HAS_SCRIPT)('progress of long store work on a terminal', () => {
  it('trace prune: a bar while batches are deleted, then how many went', async () => {
    const dbPath = await oldDatabase();
    const pty = metisInPty(['trace', 'prune', '--db', dbPath, '--days', '90']);
    expect(await pty.exited).toBe(0);
    const screen = pty.screen();
    // The bar's frames are redrawn in place (and a fast machine may finish before the first one); what
    // stays is clack's end mark and the count.
    expect(screen).toMatch(/◇ {2}deleted 5,000 events/);
    expect(screen).toMatch(/rows_deleted: 5000|5000/);
  }, 60_000);

  it('backup and restore: a spinner, then what was written', async () => {
    const dbPath = await oldDatabase();
    const dest = join(tempDir(), 'copy.db');
    const backup = metisInPty(['backup', dest, '--db', dbPath]);
    expect(await backup.exited).toBe(0);
    // The spinner's frames are redrawn in place; what stays is clack's end mark and the outcome.
    expect(backup.screen()).toMatch(/◇ {2}backed up 5,0\d\d events \(\d+\.\d MB\)/);
    const restore = metisInPty(['restore', dest, '--db', join(tempDir(), 'restored.db')]);
    expect(await restore.exited).toBe(0);
    expect(restore.screen()).toMatch(/◇ {2}restored /);
  }, 60_000);
});

describe('progress stays off a pipe', () => {
  it('trace prune and backup print their result alone', async () => {
    const dbPath = await oldDatabase();
    const home = tempDir();
    const pruned = await runCli(['trace', 'prune', '--db', dbPath, '--days', '90', '--json'], home);
    expect(pruned.exitCode).toBe(0);
    expect(JSON.parse(pruned.stdout)).toMatchObject({ rows_deleted: OLD_EVENTS });
    expect(pruned.stderr).not.toMatch(/deleting events|deleted/);
    const backup = await runCli(['backup', join(tempDir(), 'copy.db'), '--db', dbPath], home);
    expect(backup.exitCode).toBe(0);
    expect(backup.stderr).not.toContain('backing up');
  }, 60_000);
});
