import { execFileSync } from 'node:child_process';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { silentLogger } from '../logger.js';

/** One process group a tool started: its leader's pid (= the group id) and who that process was. */
interface RecordedGroup {
  readonly pgid: number;
  /** The leader's identity when it started ({@link processIdentity}): a reused pid has another. */
  readonly identity: string;
}

/**
 * The process groups tools have running, in a small file next to the database (`<db>.children`), so
 * that the next start can stop what a crashed server left behind: a SIGKILLed process runs no exit
 * hook, and a detached child outlives it (reparented to init). The file is rewritten whole on each
 * change (write, then rename); a record that cannot be written is logged and the tool still runs.
 */
export class ChildProcessRecord {
  private readonly groups = new Map<number, RecordedGroup>();

  constructor(
    private readonly file: string,
    private readonly logger: Logger = silentLogger(),
  ) {}

  /** Records a group whose leader just started. */
  add(pgid: number): void {
    const identity = processIdentity(pgid);
    if (identity === null) return; // already gone
    this.groups.set(pgid, { pgid, identity });
    this.save();
  }

  /** Forgets a group once none of its processes runs any more. */
  remove(pgid: number): void {
    if (this.groups.delete(pgid)) this.save();
  }

  private save(): void {
    try {
      if (this.groups.size === 0) {
        rmSync(this.file, { force: true });
        return;
      }
      const temporary = `${this.file}.tmp`;
      writeFileSync(temporary, JSON.stringify([...this.groups.values()]), { mode: 0o600 });
      renameSync(temporary, this.file);
    } catch (error) {
      this.logger.warn({ file: this.file, err: error }, 'could not record the running tool processes');
    }
  }
}

/**
 * At start-up, before any tool runs: SIGKILLs every group a previous run recorded whose leader is still
 * the same process (same pid, same start time, same boot), then clears the record. A pid now held by
 * another process is left alone. Returns the groups killed.
 */
export function killLeftoverChildren(file: string, logger: Logger = silentLogger()): number[] {
  let recorded: RecordedGroup[];
  try {
    recorded = JSON.parse(readFileSync(file, 'utf8')) as RecordedGroup[];
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
      logger.warn({ file, err: error }, 'could not read the record of tool processes; ignoring it');
      rmSync(file, { force: true });
    }
    return [];
  }
  const killed: number[] = [];
  for (const group of Array.isArray(recorded) ? recorded : []) {
    if (!Number.isInteger(group.pgid) || group.pgid <= 1) continue;
    const identity = processIdentity(group.pgid);
    if (identity === null || identity !== group.identity) continue;
    try {
      process.kill(-group.pgid, 'SIGKILL');
      killed.push(group.pgid);
    } catch (error) {
      logger.warn({ pgid: group.pgid, err: error }, 'could not stop a tool process left by the last run');
    }
  }
  if (killed.length > 0) {
    logger.warn({ process_groups: killed }, 'stopped tool processes the last run left running');
  }
  rmSync(file, { force: true });
  return killed;
}

/**
 * Who a process is, beyond its pid: on Linux the boot id and the start time in clock ticks from
 * /proc; elsewhere the start time `ps` prints. Null when no such process runs.
 */
export function processIdentity(pid: number): string | null {
  if (process.platform === 'linux') {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // "pid (comm) state ppid ..." — comm may hold spaces and ')', so count fields after the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] === 'Z' || fields[0] === 'X') return null;
      const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
      return `${boot}:${fields[19]}`; // field 22 of stat: starttime
    } catch {
      return null;
    }
  }
  try {
    const started = execFileSync('ps', ['-o', 'lstart=', '-p', String(pid)], { encoding: 'utf8' }).trim();
    return started === '' ? null : started;
  } catch {
    return null;
  }
}
