import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { execa } from 'execa';
import { z } from 'zod';
import { boundedSummary } from './summary-bound.js';
import { defineTool, ToolError } from './tool.js';
import { completeUtf8Prefix } from './utf8-cut.js';

export const DEFAULT_SHELL_TIMEOUT_MS = 120_000;
export const DEFAULT_SHELL_MAX_OUTPUT_BYTES = 64 * 1024;
export const DEFAULT_SHELL_KILL_GRACE_MS = 2_000;

/** Upper bound of `timeout_ms` (a day); Node timers overflow past 2^31-1 ms and fire at once. */
const MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000;
/** How often the process group is polled while it is being terminated. */
const POLL_MS = 25;
/** How long to wait for the group to vanish after SIGKILL (only uninterruptible sleep delays it). */
const SIGKILL_WAIT_MS = 5_000;
/** Once the group is gone, how long the output pipe may stay open (held by a process that left the group). */
const DRAIN_MS = 1_000;

export interface ShellToolOptions {
  /** Default time limit of a command; the model may ask for another with `timeout_ms`. Default 120 s. */
  readonly timeoutMs?: number;
  /** Most bytes of output returned to the model; the middle is cut, the head and the tail kept. Default 64 KiB. */
  readonly maxOutputBytes?: number;
  /** Time between SIGTERM and SIGKILL when a command is cancelled or times out. Default 2 s. */
  readonly killGraceMs?: number;
  /**
   * Where running process groups are recorded, so that the next start stops what a crash left
   * running (`ChildProcessRecord`).
   */
  readonly children?: { add(pgid: number): void; remove(pgid: number): void };
}

const inputSchema = z.strictObject({
  command: z.string().min(1).describe('The command line, run by /bin/sh in the workspace folder.'),
  timeout_ms: z
    .number()
    .int()
    .positive()
    .max(MAX_TIMEOUT_MS)
    .optional()
    .describe('Time limit in milliseconds; the command and everything it started are killed when it passes.'),
});

/**
 * `shell`: runs a command with `/bin/sh -c` in the workspace folder (POSIX systems).
 *
 * The command runs in its own process group (`detached`), and the tool owns that whole group: on
 * cancel or timeout the group gets SIGTERM, then SIGKILL after `killGraceMs`, and the call returns only
 * once no process of the group runs any more. execa's own `cancelSignal`/`timeout`/`forceKillAfterDelay`
 * are not used because they signal only the direct child (`/bin/sh`), which would orphan its children.
 * When the command exits on its own, what it left running in its group (`sleep 60 &`) is terminated the
 * same way: it would otherwise hold the output pipe open and outlive the call. A process that leaves the
 * group on purpose (`setsid`, daemons) is out of reach.
 *
 * A non-zero exit is not a tool failure (no `tool.failed`): the output and `exit code N` go back to
 * the model, and the call completes with `success: false`, as does a command killed by a signal.
 */
export function createShellTool(options: ShellToolOptions = {}) {
  const defaultTimeoutMs = positiveInteger(
    'timeoutMs',
    options.timeoutMs ?? DEFAULT_SHELL_TIMEOUT_MS,
    MAX_TIMEOUT_MS,
  );
  const maxOutputBytes = positiveInteger(
    'maxOutputBytes',
    options.maxOutputBytes ?? DEFAULT_SHELL_MAX_OUTPUT_BYTES,
  );
  const killGraceMs = nonNegativeInteger('killGraceMs', options.killGraceMs ?? DEFAULT_SHELL_KILL_GRACE_MS);

  return defineTool({
    name: 'shell',
    description:
      'Runs a shell command (/bin/sh -c) in the workspace folder and returns its combined stdout and stderr ' +
      `followed by its exit code. Stdin is closed. The command is killed after ${defaultTimeoutMs} ms unless ` +
      `timeout_ms says otherwise; processes it leaves running in the background are stopped when it exits. ` +
      `Output longer than ${maxOutputBytes} bytes is cut in the middle.`,
    inputSchema,
    sideEffects: 'execute',
    summarize: (input) => ({
      input_summary:
        input.timeout_ms === undefined
          ? 'run a shell command'
          : `run a shell command (timeout ${input.timeout_ms} ms)`,
      command_summary: boundedSummary(input.command),
    }),
    async execute(input, context) {
      const { signal } = context;
      const timeoutMs = input.timeout_ms ?? defaultTimeoutMs;
      if (signal.aborted) throw new ToolError('cancelled', 'the command was cancelled before it started');

      let subprocess: ReturnType<typeof spawn>;
      try {
        subprocess = spawn(input.command, context.workspacePath);
      } catch (error) {
        throw new ToolError('execution_error', `could not start the command: ${(error as Error).message}`);
      }
      const pid = subprocess.pid;
      if (pid === undefined) {
        const result = await subprocess;
        throw new ToolError(
          'execution_error',
          `could not start the command: ${result.originalMessage || result.message}`,
        );
      }
      trackGroup(pid);
      options.children?.add(pid);

      const output = new OutputCapture(maxOutputBytes);
      subprocess.all?.on('data', (chunk: Buffer | string) => output.push(chunk));
      const exited = new Promise<ExitInfo>((resolve) => {
        subprocess.once('exit', (code, exitSignal) => resolve({ code, signal: exitSignal }));
      });

      let reason: 'cancelled' | 'timeout' | undefined;
      let requestStop!: () => void;
      const stopRequested = new Promise<void>((resolve) => {
        requestStop = resolve;
      });
      const onAbort = () => {
        reason ??= 'cancelled';
        requestStop();
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => {
        reason ??= 'timeout';
        requestStop();
      }, timeoutMs);

      let termination: Promise<GroupTermination> | undefined;
      const terminate = () => {
        termination ??= terminateGroup(pid, killGraceMs, () => subprocess.kill('SIGKILL'));
        return termination;
      };
      void stopRequested.then(terminate);

      let fate: GroupTermination;
      let exit: ExitInfo | undefined;
      let pipeHeld = false;
      try {
        // Either the shell exits (then whatever it left in its group would keep the pipe open and outlive
        // the call: it is stopped too) or a cancel or the timeout stops the whole group.
        await Promise.race([exited, stopRequested]);
        fate = await terminate();
        exit = await Promise.race([exited, delay(DRAIN_MS, undefined)]);
        const drained = await Promise.race([subprocess.then(() => true), delay(DRAIN_MS, false)]);
        if (!drained) {
          // A process outside the group still holds the pipe: stop reading so execa can settle.
          pipeHeld = true;
          subprocess.all?.destroy();
          subprocess.stdout?.destroy();
          subprocess.stderr?.destroy();
          await Promise.race([subprocess, delay(DRAIN_MS)]);
        }
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      }
      if (fate.gone) {
        untrackGroup(pid);
        options.children?.remove(pid);
      }

      const aftermath = fate.gone
        ? 'its process group was terminated'
        : 'some processes of its group were still running after SIGKILL';
      if (reason === 'cancelled') throw new ToolError('cancelled', `the command was cancelled; ${aftermath}`);
      if (reason === 'timeout') {
        throw new ToolError('timeout', `the command did not finish within ${timeoutMs} ms; ${aftermath}`);
      }

      const notes: string[] = [];
      notes.push(
        exit === undefined
          ? 'the exit status is unknown'
          : exit.code !== null
            ? `exit code ${exit.code}`
            : `terminated by signal ${exit.signal ?? 'unknown'}`,
      );
      if (fate.signalled) notes.push('processes it left running in the background were terminated');
      if (pipeHeld)
        notes.push('a process that left its process group still holds the output and was not stopped');
      const text = output.render().replace(/\n$/, '');
      return {
        content: `${text === '' ? '(no output)' : text}\n\n${notes.join('\n')}`,
        success: exit?.code === 0,
        commandExecuted: input.command,
      };
    },
  });
}

interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

function spawn(command: string, cwd: string) {
  return execa(command, {
    shell: true,
    cwd,
    reject: false,
    all: true,
    buffer: false,
    stdin: 'ignore',
    detached: true,
    windowsHide: true,
  });
}

// ---------------------------------------------------------------------------------------------------
// Process groups

interface GroupTermination {
  /** Whether any signal had to be sent (the group still had running members). */
  readonly signalled: boolean;
  /** Whether no member of the group runs any more. */
  readonly gone: boolean;
}

/**
 * SIGTERM (and SIGCONT, so stopped members see it) to the whole group, SIGKILL after `graceMs` if a
 * member still runs, then wait for the group to disappear.
 */
async function terminateGroup(
  pgid: number,
  graceMs: number,
  fallback: () => void,
): Promise<GroupTermination> {
  if (process.platform === 'win32') {
    // No process groups: only the direct child can be killed.
    fallback();
    return { signalled: true, gone: true };
  }
  if (!(await groupRuns(pgid))) return { signalled: false, gone: true };
  signalGroup(pgid, 'SIGTERM');
  signalGroup(pgid, 'SIGCONT');
  if (await waitUntilGroupGone(pgid, graceMs)) return { signalled: true, gone: true };
  signalGroup(pgid, 'SIGKILL');
  return { signalled: true, gone: await waitUntilGroupGone(pgid, SIGKILL_WAIT_MS) };
}

async function waitUntilGroupGone(pgid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    await delay(Math.min(POLL_MS, Math.max(1, deadline - Date.now())));
    if (!(await groupRuns(pgid))) return true;
  }
  return !(await groupRuns(pgid));
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: the group is already gone; EPERM: a member we may not signal (setuid), nothing more to do.
  }
}

/** Whether a member of the process group still runs. Zombies are dead and do not count. */
async function groupRuns(pgid: number): Promise<boolean> {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  // kill(2) also reaches zombies. An orphan stays a zombie until init reaps it, and the init of some
  // containers never does, so on Linux look for a member that is not a zombie.
  if (process.platform !== 'linux') return true;
  return linuxGroupHasRunningMember(pgid);
}

async function linuxGroupHasRunningMember(pgid: number): Promise<boolean> {
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return true;
  }
  for (const entry of entries) {
    const first = entry.charCodeAt(0);
    if (first < 48 || first > 57) continue;
    let stat: string;
    try {
      stat = await readFile(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid pgrp ..." — comm may hold spaces and parentheses, so split after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}

/** Groups still running; SIGKILLed if this process exits (execa's `cleanup` skips detached children). */
const runningGroups = new Set<number>();
let exitHookInstalled = false;

function trackGroup(pgid: number): void {
  runningGroups.add(pgid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const group of runningGroups) signalGroup(group, 'SIGKILL');
  });
}

function untrackGroup(pgid: number): void {
  runningGroups.delete(pgid);
}

// ---------------------------------------------------------------------------------------------------
// Output

/** Keeps the first and the last bytes of a stream, at most `maxBytes` in all, and counts the rest. */
class OutputCapture {
  private readonly headLimit: number;
  private readonly tailLimit: number;
  private readonly head: Buffer[] = [];
  private headLength = 0;
  private readonly tail: Buffer[] = [];
  private tailLength = 0;
  private total = 0;

  constructor(maxBytes: number) {
    this.headLimit = Math.ceil(maxBytes / 2);
    this.tailLimit = maxBytes - this.headLimit;
  }

  push(chunk: Buffer | string): void {
    let data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    this.total += data.length;
    if (this.headLength < this.headLimit) {
      const take = Math.min(data.length, this.headLimit - this.headLength);
      this.head.push(data.subarray(0, take));
      this.headLength += take;
      data = data.subarray(take);
      if (data.length === 0) return;
    }
    this.tail.push(data);
    this.tailLength += data.length;
    while (this.tail.length > 1 && this.tailLength - this.tail[0]!.length >= this.tailLimit) {
      this.tailLength -= this.tail.shift()!.length;
    }
  }

  render(): string {
    const head = Buffer.concat(this.head);
    const tail = Buffer.concat(this.tail);
    if (this.total <= this.headLimit + this.tailLimit) return Buffer.concat([head, tail]).toString('utf8');
    const headEnd = completeUtf8Prefix(head);
    let tailStart = Math.max(0, tail.length - this.tailLimit);
    while (tailStart < tail.length && (tail[tailStart]! & 0xc0) === 0x80) tailStart++;
    const kept = headEnd + (tail.length - tailStart);
    return (
      `${head.subarray(0, headEnd).toString('utf8')}\n[... truncated ${this.total - kept} bytes]\n` +
      tail.subarray(tailStart).toString('utf8')
    );
  }
}

function positiveInteger(name: string, value: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value <= 0 || value > max) {
    throw new RangeError(`shell ${name} must be a positive integer up to ${max}`);
  }
  return value;
}

function nonNegativeInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > MAX_TIMEOUT_MS) {
    throw new RangeError(`shell ${name} must be a non-negative integer up to ${MAX_TIMEOUT_MS}`);
  }
  return value;
}
