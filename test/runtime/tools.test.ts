import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { builtinTools } from '../../src/core/runtime/tools/builtin.js';
import { currentTimeTool } from '../../src/core/runtime/tools/current-time.js';
import { createReadFileTool } from '../../src/core/runtime/tools/read-file.js';
import { createShellTool } from '../../src/core/runtime/tools/shell.js';
import { type ToolContext, ToolError, type ToolErrorClass } from '../../src/core/runtime/tools/tool.js';
import { isGone, procStat, runningGroupMembers } from '../helpers/processes.js';

let workspace: string;

beforeEach(() => {
  workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'metis-tools-'));
});

afterEach(() => {
  fs.rmSync(workspace, { recursive: true, force: true });
});

function contextFor(
  signal: AbortSignal = new AbortController().signal,
  workspacePath = workspace,
): ToolContext {
  return {
    sessionId: 'ses_test',
    turnId: 'turn_test',
    toolUseId: 'tu_test',
    workspacePath,
    signal,
    toolCalledEventId: 'evt_called',
    callCompletedEventId: 'evt_completed',
  };
}

async function expectToolError(promise: Promise<unknown>, errorClass: ToolErrorClass): Promise<ToolError> {
  const error = await promise.then(
    () => {
      throw new Error(`expected a ToolError '${errorClass}', the tool succeeded`);
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ToolError);
  expect((error as ToolError).errorClass).toBe(errorClass);
  return error as ToolError;
}

/** Waits until the file holds `count` complete lines of pids. */
async function readPids(file: string, count: number): Promise<number[]> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
    const lines = text.split('\n');
    const complete = lines.slice(0, -1).filter((line) => /^\d+$/.test(line));
    if (complete.length >= count) return complete.map(Number);
    await delay(20);
  }
  throw new Error(`${file} did not get ${count} pids`);
}

function assertAllGone(pids: readonly number[]): void {
  const remaining = pids.filter((pid) => !isGone(pid));
  expect(
    remaining,
    `processes still running: ${remaining.map((p) => `${p} ${procStat(p)}`).join(', ')}`,
  ).toEqual([]);
  // The shell ($$, first line) leads the group: no member may run any more.
  if (process.platform === 'linux') expect(runningGroupMembers(pids[0]!)).toEqual([]);
}

/** A shell, a subshell and a sleep in the subshell (a grandchild): each writes its pid to `file`. */
const treeCommand = (file: string) =>
  `echo $$ > ${file}; (sleep 30 & echo $! >> ${file}; wait) & echo $! >> ${file}; wait`;

describe('current_time', () => {
  it('returns the current time in UTC and the local timezone', async () => {
    const { content } = await currentTimeTool.execute({}, contextFor());
    const utc = /^utc: (.+)$/m.exec(content)?.[1];
    expect(utc).toMatch(/Z$/);
    expect(Number.isNaN(Date.parse(utc!))).toBe(false);
    expect(Math.abs(Date.parse(utc!) - Date.now())).toBeLessThan(60 * 60 * 1000);
    expect(content).toMatch(/^timezone: \S+$/m);
    expect(content).toMatch(/^local: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$/m);
  });

  it('accepts only an empty object', () => {
    expect(currentTimeTool.inputSchema.safeParse({}).success).toBe(true);
    expect(currentTimeTool.inputSchema.safeParse({ zone: 'UTC' }).success).toBe(false);
    expect(currentTimeTool.sideEffects).toBe('none');
  });
});

describe('read_file', () => {
  const tool = createReadFileTool({});

  it('reads a file relative to the workspace', async () => {
    fs.mkdirSync(path.join(workspace, 'notes'));
    fs.writeFileSync(path.join(workspace, 'notes', 'a.txt'), 'hello\nworld — ünïcode\n');
    const { content } = await tool.execute({ path: 'notes/a.txt' }, contextFor());
    expect(content).toBe('hello\nworld — ünïcode\n');
    expect(tool.sideEffects).toBe('read');
  });

  it('reads an absolute path inside the workspace; outside it, only after a confirmation', async () => {
    const file = path.join(workspace, 'abs.txt');
    fs.writeFileSync(file, 'absolute');
    expect((await tool.execute({ path: file }, contextFor())).content).toBe('absolute');
    // Issue 13: run directly (no dispatcher to ask), a path outside the workspace is refused.
    const other = fs.mkdtempSync(path.join(os.tmpdir(), 'metis-tools-other-'));
    try {
      const error = await expectToolError(
        tool.execute({ path: file }, contextFor(undefined, other)),
        'permission_denied',
      );
      expect(error.message).toContain(fs.realpathSync(file));
    } finally {
      fs.rmSync(other, { recursive: true, force: true });
    }
  });

  it('reports a missing file as not_found', async () => {
    const error = await expectToolError(tool.execute({ path: 'missing.txt' }, contextFor()), 'not_found');
    expect(error.message).toContain('missing.txt');
    await expectToolError(tool.execute({ path: 'missing-dir/x.txt' }, contextFor()), 'not_found');
  });

  it('reports a directory as execution_error', async () => {
    fs.mkdirSync(path.join(workspace, 'sub'));
    const error = await expectToolError(tool.execute({ path: 'sub' }, contextFor()), 'execution_error');
    expect(error.message).toMatch(/directory/);
  });

  it('reports an unreadable file as permission_denied', async (context) => {
    const file = path.join(workspace, 'secret.txt');
    fs.writeFileSync(file, 'secret');
    fs.chmodSync(file, 0o000);
    if (process.getuid?.() !== 0) {
      await expectToolError(tool.execute({ path: 'secret.txt' }, contextFor()), 'permission_denied');
      return;
    }
    // Root reads a mode-000 file through CAP_DAC_OVERRIDE: run the tool in a child without that
    // capability (and without CAP_DAC_READ_SEARCH), where the kernel answers EACCES as for any user.
    const setpriv = ['/usr/bin/setpriv', '/bin/setpriv'].find((candidate) => fs.existsSync(candidate));
    if (setpriv === undefined) {
      const reason = 'skipped: running as root and setpriv (util-linux) is missing, so no EACCES can be made';
      console.warn(reason);
      context.skip(reason);
      return;
    }
    const child = await execa(
      setpriv,
      [
        '--bounding-set=-dac_override,-dac_read_search',
        process.execPath,
        '--import',
        'tsx',
        path.resolve('test/fixtures/read-file-child.ts'),
        workspace,
        'secret.txt',
      ],
      { reject: false },
    );
    expect(child.stderr).toBe('');
    expect(JSON.parse(child.stdout)).toEqual({ errorClass: 'permission_denied' });
  });

  it('truncates a large file with a marker giving the cut size', async () => {
    fs.writeFileSync(path.join(workspace, 'big.txt'), 'a'.repeat(250));
    const small = createReadFileTool({ maxBytes: 100 });
    const { content } = await small.execute({ path: 'big.txt' }, contextFor());
    expect(content).toBe(`${'a'.repeat(100)}\n[... truncated 150 bytes]`);
  });

  it('does not split a UTF-8 character at the cut', async () => {
    fs.writeFileSync(path.join(workspace, 'utf8.txt'), 'é'.repeat(100)); // 200 bytes
    const small = createReadFileTool({ maxBytes: 101 });
    const { content } = await small.execute({ path: 'utf8.txt' }, contextFor());
    expect(content).toBe(`${'é'.repeat(50)}\n[... truncated 100 bytes]`);
    expect(content).not.toContain('\uFFFD');
  });

  it('says a binary file is binary instead of dumping it', async () => {
    fs.writeFileSync(
      path.join(workspace, 'blob.bin'),
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x01, 0xff, 0x00]),
    );
    const { content } = await tool.execute({ path: 'blob.bin' }, contextFor());
    expect(content).toMatch(/binary/);
    expect(content).toContain('8 bytes');
    expect(content).not.toContain('\u0000');
  });

  it('says a file is empty', async () => {
    fs.writeFileSync(path.join(workspace, 'empty.txt'), '');
    expect((await tool.execute({ path: 'empty.txt' }, contextFor())).content).toBe('(empty file)');
  });

  it('fails with cancelled when the signal is already aborted', async () => {
    fs.writeFileSync(path.join(workspace, 'a.txt'), 'x');
    const controller = new AbortController();
    controller.abort();
    await expectToolError(tool.execute({ path: 'a.txt' }, contextFor(controller.signal)), 'cancelled');
  });

  it('validates its input', () => {
    expect(tool.inputSchema.safeParse({ path: '' }).success).toBe(false);
    expect(tool.inputSchema.safeParse({ path: 'a', extra: 1 }).success).toBe(false);
    expect(tool.summarize?.({ path: 'a.txt' }).input_summary).toContain('a.txt');
  });
});

describe.skipIf(process.platform === 'win32')('shell', () => {
  const shell = createShellTool({ killGraceMs: 500 });

  it('captures stdout and stderr and reports exit code 0', async () => {
    const output = await shell.execute({ command: 'echo out; echo err >&2' }, contextFor());
    expect(output.content).toContain('out');
    expect(output.content).toContain('err');
    expect(output.content).toMatch(/exit code 0$/);
    expect(output.success).toBe(true);
    expect(output.commandExecuted).toBe('echo out; echo err >&2');
  });

  it('runs in the workspace folder', async () => {
    const { content } = await shell.execute({ command: 'pwd' }, contextFor());
    expect(content.split('\n')[0]).toBe(fs.realpathSync(workspace));
  });

  it('reports a non-zero exit in the content and as success: false, instead of failing', async () => {
    const { content, success } = await shell.execute({ command: 'echo nope; exit 3' }, contextFor());
    expect(content).toContain('nope');
    expect(content).toMatch(/exit code 3$/);
    expect(success).toBe(false);
    const missing = await shell.execute({ command: 'definitely-not-a-command-metis' }, contextFor());
    expect(missing.content).toMatch(/exit code 127$/);
    expect(missing.success).toBe(false);
  });

  it('says when there was no output', async () => {
    expect((await shell.execute({ command: 'true' }, contextFor())).content).toBe(
      '(no output)\n\nexit code 0',
    );
  });

  it('reports a command that could not be started as execution_error', async () => {
    const nowhere = path.join(workspace, 'does-not-exist');
    await expectToolError(
      shell.execute({ command: 'echo hi' }, contextFor(undefined, nowhere)),
      'execution_error',
    );
  });

  it('keeps the head and the tail of long output and marks the cut', async () => {
    const small = createShellTool({ maxOutputBytes: 1000 });
    const { content } = await small.execute({ command: 'seq 1 20000' }, contextFor());
    expect(content.startsWith('1\n2\n3\n')).toBe(true);
    expect(content).toMatch(/\n\[\.\.\. truncated \d+ bytes\]\n/);
    expect(content).toMatch(/\n19999\n20000\n\nexit code 0$/);
    const total = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('').length;
    const cut = Number(/truncated (\d+) bytes/.exec(content)?.[1]);
    expect(cut).toBe(total - 1000);
  });

  it('does not stop a command that fills the output well past the cap', async () => {
    const small = createShellTool({ maxOutputBytes: 2000 });
    const { content } = await small.execute(
      { command: 'head -c 5000000 /dev/zero | tr "\\0" x; echo; echo end' },
      contextFor(),
    );
    expect(content).toMatch(/\nend\n\nexit code 0$/);
    expect(Buffer.byteLength(content)).toBeLessThan(2200);
  });

  it('terminates the process group on timeout', async () => {
    const file = path.join(workspace, 'pids-timeout');
    const run = shell.execute({ command: treeCommand(file), timeout_ms: 1500 }, contextFor());
    const pids = await readPids(file, 3);
    const error = await expectToolError(run, 'timeout');
    expect(error.message).toContain('1500 ms');
    assertAllGone(pids);
  });

  it('stops what the command left running in the background when it exits', async () => {
    const file = path.join(workspace, 'pids-bg');
    const { content } = await shell.execute(
      { command: `sleep 30 & echo $! > ${file}; echo done` },
      contextFor(),
    );
    expect(content).toMatch(/^done\n/);
    expect(content).toContain('exit code 0');
    expect(content).toContain('background');
    const [pid] = await readPids(file, 1);
    expect(isGone(pid!)).toBe(true);
  });

  it('fails with cancelled without starting when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const file = path.join(workspace, 'never');
    await expectToolError(
      shell.execute({ command: `touch ${file}` }, contextFor(controller.signal)),
      'cancelled',
    );
    await delay(100);
    expect(fs.existsSync(file)).toBe(false);
  });

  for (let round = 1; round <= 5; round++) {
    it(`cancel kills the command and all its descendants (round ${round})`, async () => {
      const controller = new AbortController();
      const file = path.join(workspace, `pids-${round}`);
      const run = shell.execute({ command: treeCommand(file) }, contextFor(controller.signal));
      const pids = await readPids(file, 3);
      expect(pids.every((pid) => !isGone(pid))).toBe(true);
      controller.abort();
      await expectToolError(run, 'cancelled');
      // The tool returns only once the group is gone: no polling needed here.
      assertAllGone(pids);
    });
  }

  it('SIGKILLs a command that ignores SIGTERM after the grace period', async () => {
    const stubborn = createShellTool({ killGraceMs: 200 });
    const controller = new AbortController();
    const file = path.join(workspace, 'pids-trap');
    const command = `trap '' TERM; echo $$ > ${file}; sleep 30 & echo $! >> ${file}; wait`;
    const run = stubborn.execute({ command }, contextFor(controller.signal));
    const pids = await readPids(file, 2);
    controller.abort();
    await expectToolError(run, 'cancelled');
    assertAllGone(pids);
  });

  it('validates its input and summarizes long commands', () => {
    const schema = shell.inputSchema;
    expect(schema.safeParse({ command: '' }).success).toBe(false);
    expect(schema.safeParse({ command: 'ls', timeout_ms: 0 }).success).toBe(false);
    expect(schema.safeParse({ command: 'ls', timeout_ms: 1.5 }).success).toBe(false);
    expect(schema.safeParse({ command: 'ls', cwd: '/' }).success).toBe(false);
    expect(schema.safeParse({ command: 'ls', timeout_ms: 1000 }).success).toBe(true);
    // A long command is shown whole (issue 13: 200 of 286 characters were shown, the tail ran hidden).
    const long = `echo ${'x'.repeat(500)}`;
    const summary = shell.summarize?.({ command: long });
    expect(summary?.command_summary).toBe(long);
    expect(summary?.input_summary).toBeTruthy();
    // Past the generous bound the cut is explicit: how many characters are missing, and where they are.
    const huge = `echo ${'y'.repeat(5000)}`;
    const cut = shell.summarize?.({ command: huge })?.command_summary ?? '';
    expect(cut.startsWith(huge.slice(0, 4000))).toBe(true);
    expect(cut).toContain('[cut: 1005 more characters not shown here;');
    expect(cut).toContain('metis confirm <session>');
    expect(shell.sideEffects).toBe('execute');
  });
});

describe('builtinTools', () => {
  it('returns current_time, read_file and shell', () => {
    expect(builtinTools({ shell: { timeoutMs: 1000 } }).map((t) => t.name)).toEqual([
      'current_time',
      'read_file',
      'shell',
    ]);
  });
});
