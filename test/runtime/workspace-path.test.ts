import { mkdirSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fileAccessConfirmation } from '../../src/core/runtime/tools/file-access.js';
import { createReadFileTool } from '../../src/core/runtime/tools/read-file.js';
import { SecretPaths } from '../../src/core/runtime/tools/secret-paths.js';
import { type ToolContext, ToolError } from '../../src/core/runtime/tools/tool.js';
import { resolveInWorkspace } from '../../src/core/runtime/tools/workspace-path.js';
import { tempDir } from '../helpers/tmp.js';

/** `<root>/ws` (the workspace) next to `<root>/other`, both real paths. */
function layout() {
  const root = realpathSync(tempDir('metis-resolve-'));
  const ws = join(root, 'ws');
  const other = join(root, 'other');
  mkdirSync(join(ws, 'sub'), { recursive: true });
  mkdirSync(join(other, 'deep'), { recursive: true });
  writeFileSync(join(ws, 'a.txt'), 'a');
  writeFileSync(join(other, 'b.txt'), 'b');
  return { root, ws, other };
}

describe('resolveInWorkspace', () => {
  it('resolves a relative path inside the workspace', async () => {
    const { ws } = layout();
    const r = await resolveInWorkspace('sub/../a.txt', ws);
    expect(r).toMatchObject({ real: join(ws, 'a.txt'), failure: null, insideWorkspace: true, workspace: ws });
  });

  it('puts `..` out of the workspace outside, and `..` beyond the root stays at the root', async () => {
    const { ws, other } = layout();
    expect(await resolveInWorkspace('../other/b.txt', ws)).toMatchObject({
      real: join(other, 'b.txt'),
      insideWorkspace: false,
    });
    const deep = await resolveInWorkspace(`${'../'.repeat(40)}etc/passwd`, ws);
    expect(deep).toMatchObject({ real: realpathSync('/etc/passwd'), insideWorkspace: false });
    expect((await resolveInWorkspace('/../../etc/passwd', ws)).real).toBe(realpathSync('/etc/passwd'));
  });

  it('takes an absolute path as is: inside when it is under the workspace, outside otherwise', async () => {
    const { ws, other } = layout();
    expect((await resolveInWorkspace(join(ws, 'a.txt'), ws)).insideWorkspace).toBe(true);
    expect((await resolveInWorkspace(join(other, 'b.txt'), ws)).insideWorkspace).toBe(false);
    expect((await resolveInWorkspace('/etc/passwd', ws)).insideWorkspace).toBe(false);
  });

  it('does not take a sibling whose name starts with the workspace name for inside', async () => {
    const { root, ws } = layout();
    mkdirSync(`${ws}-evil`);
    writeFileSync(join(`${ws}-evil`, 'x'), 'x');
    expect((await resolveInWorkspace(join(root, 'ws-evil', 'x'), ws)).insideWorkspace).toBe(false);
  });

  it('follows symlinks: a link inside pointing outside is outside, one outside pointing inside is inside', async () => {
    const { root, ws, other } = layout();
    symlinkSync(join(other, 'b.txt'), join(ws, 'out-link'));
    symlinkSync(join(ws, 'a.txt'), join(root, 'in-link'));
    expect(await resolveInWorkspace('out-link', ws)).toMatchObject({
      real: join(other, 'b.txt'),
      insideWorkspace: false,
    });
    expect(await resolveInWorkspace(join(root, 'in-link'), ws)).toMatchObject({
      real: join(ws, 'a.txt'),
      insideWorkspace: true,
    });
  });

  it('resolves `link/..` as the kernel does: after following the link', async () => {
    const { ws, other } = layout();
    symlinkSync(join(other, 'deep'), join(ws, 'dir-link'));
    const r = await resolveInWorkspace('dir-link/../b.txt', ws);
    expect(r).toMatchObject({ real: join(other, 'b.txt'), insideWorkspace: false, failure: null });
  });

  it('decides a missing file by its nearest existing parent', async () => {
    const { ws, other } = layout();
    symlinkSync(other, join(ws, 'other-link'));
    const inside = await resolveInWorkspace('sub/missing/x.txt', ws);
    expect(inside).toMatchObject({ real: join(ws, 'sub', 'missing', 'x.txt'), insideWorkspace: true });
    expect(inside.failure?.code).toBe('ENOENT');
    const outside = await resolveInWorkspace('other-link/missing.txt', ws);
    expect(outside).toMatchObject({ real: join(other, 'missing.txt'), insideWorkspace: false });
    expect(outside.failure?.code).toBe('ENOENT');
  });

  it('reports a symlink loop (ELOOP) and decides by the nearest parent that resolves', async () => {
    const { ws, other } = layout();
    symlinkSync(join(ws, 'loop-b'), join(ws, 'loop-a'));
    symlinkSync(join(ws, 'loop-a'), join(ws, 'loop-b'));
    symlinkSync(join(other, 'loop-d'), join(other, 'loop-c'));
    symlinkSync(join(other, 'loop-c'), join(other, 'loop-d'));
    symlinkSync(other, join(ws, 'other-link'));
    const inside = await resolveInWorkspace('loop-a', ws);
    expect(inside.failure?.code).toBe('ELOOP');
    expect(inside).toMatchObject({ real: join(ws, 'loop-a'), insideWorkspace: true });
    const outside = await resolveInWorkspace('other-link/loop-c', ws);
    expect(outside.failure?.code).toBe('ELOOP');
    expect(outside).toMatchObject({ real: join(other, 'loop-c'), insideWorkspace: false });
  });

  it('compares against the workspace real path when the workspace is given through a symlink', async () => {
    const { root, ws } = layout();
    symlinkSync(ws, join(root, 'ws-link'));
    const r = await resolveInWorkspace('a.txt', join(root, 'ws-link'));
    expect(r).toMatchObject({ workspace: ws, real: join(ws, 'a.txt'), insideWorkspace: true });
  });
});

describe('fileAccessConfirmation', () => {
  const secrets = new SecretPaths({ home: '/nonexistent-home', env: { METIS_HOME: '/nonexistent-metis' } });

  it('asks outside under ask, runs under allow, and deny refuses even a secrets file', async () => {
    const { ws, other } = layout();
    writeFileSync(join(other, '.env'), 'K=v');
    const out = await resolveInWorkspace('../other/b.txt', ws);
    const secret = await resolveInWorkspace('../other/.env', ws);
    const ask = await fileAccessConfirmation('read_file', 'read', out, { outsideWorkspace: 'ask', secrets });
    expect(ask).toMatchObject({ side_effects: 'read', session_allowable: true });
    expect(ask!.input_summary).toBe(
      `read ${join(other, 'b.txt')} (given as "../other/b.txt"): outside the workspace ${ws}`,
    );
    expect(
      await fileAccessConfirmation('read_file', 'read', out, { outsideWorkspace: 'allow', secrets }),
    ).toBeNull();
    const allowSecret = await fileAccessConfirmation('read_file', 'read', secret, {
      outsideWorkspace: 'allow',
      secrets,
    });
    expect(allowSecret).toMatchObject({ session_allowable: false });
    expect(allowSecret!.input_summary).toContain('may hold secrets (an environment file)');
    const denied = await fileAccessConfirmation('read_file', 'read', secret, {
      outsideWorkspace: 'deny',
      secrets,
    }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(ToolError);
    expect((denied as ToolError).errorClass).toBe('permission_denied');
    expect((denied as ToolError).message).toContain(join(other, '.env'));
    expect((denied as ToolError).message).toContain('runtime.outside_workspace');
  });
});

describe('read_file reads exactly what was checked', () => {
  function contextFor(workspacePath: string): ToolContext {
    return {
      sessionId: 'ses_test',
      turnId: 'turn_test',
      toolUseId: 'tu_test',
      workspacePath,
      signal: new AbortController().signal,
      toolCalledEventId: null,
      callCompletedEventId: null,
    };
  }

  it('refuses a file replaced after the check, reading nothing of the new one', async () => {
    const { ws } = layout();
    const tool = createReadFileTool();
    const check = await tool.checkCall!({ path: 'a.txt' }, contextFor(ws));
    expect(check.confirmation).toBeNull();
    writeFileSync(join(ws, 'swap.txt'), 'swapped in');
    renameSync(join(ws, 'swap.txt'), join(ws, 'a.txt'));
    const error = await tool.execute({ path: 'a.txt' }, contextFor(ws), check.prepared).catch((e) => e);
    expect(error).toBeInstanceOf(ToolError);
    expect(error.errorClass).toBe('execution_error');
    expect(error.message).toMatch(/changed between the check and the read/);
  });

  it('refuses a file swapped for a symlink to a file outside after the check', async () => {
    const { ws, other } = layout();
    const tool = createReadFileTool();
    const check = await tool.checkCall!({ path: 'a.txt' }, contextFor(ws));
    rmSync(join(ws, 'a.txt'));
    symlinkSync(join(other, 'b.txt'), join(ws, 'a.txt'));
    const error = await tool.execute({ path: 'a.txt' }, contextFor(ws), check.prepared).catch((e) => e);
    expect(error).toBeInstanceOf(ToolError);
    expect(error.message).toMatch(/changed between the check and the read/);
  });

  it('run without the dispatcher (no check), refuses what would need a confirmation', async () => {
    const { ws } = layout();
    const tool = createReadFileTool();
    const error = await tool.execute({ path: '../other/b.txt' }, contextFor(ws)).catch((e) => e);
    expect(error).toBeInstanceOf(ToolError);
    expect(error.errorClass).toBe('permission_denied');
    expect((await tool.execute({ path: 'a.txt' }, contextFor(ws))).content).toBe('a');
  });

  it('refuses a path holding a NUL character as invalid input', () => {
    expect(createReadFileTool().inputSchema.safeParse({ path: 'a.txt\u0000.png' }).success).toBe(false);
  });
});
