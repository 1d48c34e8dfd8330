import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CATALOG } from '../../src/core/events/catalog/index.js';
import { expectCatalogShape, storedTurn } from '../helpers/scripted-turn.js';
import { startTestServer } from '../helpers/server.js';

/** Issue 33 (memory): the `memory` tool, driven by the scripted model, against a real server. */

const sha = (text: string) => createHash('sha256').update(text).digest('hex');

const ofType = (events: any[], type: string) => events.filter((e) => e.type === type);

/** The catalog's rules for the event, checked on what was stored. */
function followsCatalog(event: any, events: any[]) {
  const parent = expectCatalogShape(event, events);
  expect(parent?.type).toBe(CATALOG.get(event.type)!.parent);
}

describe('memory tool (MEMORY.md, USER.md)', () => {
  it('remember: writes MEMORY.md atomically, emits memory.updated, and the next turn sees it', async () => {
    const t = await startTestServer();
    const session = await t.createSession();
    const path = join(t.workspace, '.metis', 'MEMORY.md');
    expect(existsSync(path)).toBe(false);

    const first = await storedTurn(t, session, 'remember: the build uses pnpm');
    const text = readFileSync(path, 'utf8');
    expect(text).toContain('- the build uses pnpm\n');
    expect(text).toMatch(/^# Memory\n/);
    // Written through a temporary file renamed over it: none is left behind.
    expect(readdirSync(join(t.workspace, '.metis')).sort()).toEqual(['MEMORY.md']);

    const [updated] = ofType(first.events, 'memory.updated');
    expect(updated).toBeDefined();
    followsCatalog(updated, first.events);
    expect(updated.actor).toBe('agent');
    expect(updated.payload).toEqual({
      file: 'MEMORY.md',
      operation: 'add',
      before_hash: sha(''),
      after_hash: sha(text),
      before_size_bytes: 0,
      after_size_bytes: Buffer.byteLength(text),
    });
    expect(ofType(first.events, 'memory.eviction')).toEqual([]);
    expect(ofType(first.events, 'tool.completed')[0].payload.files_modified).toEqual(['.metis/MEMORY.md']);

    await storedTurn(t, session, 'remember user: prefers short answers');
    expect(readFileSync(join(t.workspace, '.metis', 'USER.md'), 'utf8')).toContain(
      '- prefers short answers\n',
    );

    // The next turn's model call gets both files in its system prompt; `recall` says it back.
    const recall = await storedTurn(t, session, 'recall');
    expect(recall.text).toContain('- the build uses pnpm');
    expect(recall.text).toContain('- prefers short answers');
    expect(recall.text).toContain('.metis/MEMORY.md');
  });

  it('over the cap: the oldest entries go (memory.eviction size_cap_exceeded) and the file fits', async () => {
    const t = await startTestServer({ memory: { max_bytes: 420 } });
    const session = await t.createSession();
    const path = join(t.workspace, '.metis', 'MEMORY.md');
    for (let i = 1; i <= 3; i += 1)
      await storedTurn(t, session, `remember: fact number ${i} ${'x'.repeat(60)}`);
    expect(ofType((await storedTurn(t, session, 'recall')).all, 'memory.eviction')).toEqual([]);

    const over = await storedTurn(t, session, `remember: fact number 4 ${'y'.repeat(60)}`);
    const text = readFileSync(path, 'utf8');
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(420);
    expect(text).not.toContain('fact number 1 ');
    expect(text).toContain('fact number 4 ');
    const [updated] = ofType(over.events, 'memory.updated');
    const [eviction] = ofType(over.events, 'memory.eviction');
    followsCatalog(eviction, over.events);
    expect(eviction.parent_event_id).toBe(updated.id);
    expect(eviction.actor).toBe('system');
    expect(eviction.payload).toMatchObject({
      file: 'MEMORY.md',
      trigger: 'size_cap_exceeded',
      size_before_bytes: updated.payload.after_size_bytes,
      size_after_bytes: Buffer.byteLength(text),
    });
    expect(eviction.payload.entries_evicted).toBeGreaterThanOrEqual(1);
    expect(eviction.payload.size_before_bytes).toBeGreaterThan(420);
  });

  it('consolidate replaces the entries (operation consolidate)', async () => {
    const t = await startTestServer();
    const session = await t.createSession();
    await storedTurn(t, session, 'remember: uses pnpm');
    await storedTurn(t, session, 'remember: uses pnpm 9');
    const done = await storedTurn(t, session, 'consolidate: uses pnpm 9 | tests run with vitest');
    const text = readFileSync(join(t.workspace, '.metis', 'MEMORY.md'), 'utf8');
    expect(text.split('\n').filter((l) => l.startsWith('- '))).toEqual([
      '- uses pnpm 9',
      '- tests run with vitest',
    ]);
    expect(ofType(done.events, 'memory.updated')[0].payload.operation).toBe('consolidate');
  });

  it('a file over the cap or malformed is a clear error naming it, for the tool and in the prompt', async () => {
    const t = await startTestServer({ memory: { max_bytes: 300 } });
    const session = await t.createSession();
    await mkdir(join(t.workspace, '.metis'));
    const memoryPath = join(t.workspace, '.metis', 'MEMORY.md');
    const userPath = join(t.workspace, '.metis', 'USER.md');
    writeFileSync(memoryPath, `# Memory\n\n${'- a long entry\n'.repeat(40)}`);
    writeFileSync(userPath, '# User\n\n- likes tea\nnot an entry\n');

    const tool = await storedTurn(t, session, 'remember: more');
    const [failed] = ofType(tool.events, 'tool.failed');
    expect(failed.payload.error_class).toBe('validation_error');
    expect(failed.payload.error_message).toContain(memoryPath);
    expect(failed.payload.error_message).toContain('over the cap of 300');
    expect(ofType(tool.events, 'memory.updated')).toEqual([]);

    const user = await storedTurn(t, session, 'remember user: more');
    const [userFailed] = ofType(user.events, 'tool.failed');
    expect(userFailed.payload.error_message).toContain(userPath);
    expect(userFailed.payload.error_message).toContain('line 4 is not an entry');
    expect(readFileSync(userPath, 'utf8')).toBe('# User\n\n- likes tea\nnot an entry\n');

    // The turn goes on without them; the model is told why each was left out.
    const recall = await storedTurn(t, session, 'recall');
    expect(recall.text).toContain(`Not loaded: memory file ${memoryPath}`);
    expect(recall.text).toContain(`Not loaded: memory file ${userPath}`);
  });
});
