import fs from 'node:fs';

/** `[state, ppid, pgrp]` of a process from /proc, or null when it does not exist. */
export function procStat(pid: number): [string, number, number] | null {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return [fields[0] ?? '?', Number(fields[1]), Number(fields[2])];
}

/**
 * Whether a process no longer runs: it does not exist, or it is a zombie that is not ours to reap. An
 * orphan is reparented to init, and the init of some containers never reaps, so a killed grandchild
 * can stay a zombie; a zombie whose parent is this test process would be a missing reap and fails.
 */
export function isGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return true;
    throw error;
  }
  const stat = procStat(pid);
  if (stat === null) return true;
  return stat[0] === 'Z' && stat[1] !== process.pid;
}

/** Pids of the group's members that still run (not zombies); Linux only. */
export function runningGroupMembers(pgid: number): number[] {
  return fs
    .readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => {
      const stat = procStat(pid);
      return stat !== null && stat[2] === pgid && stat[0] !== 'Z';
    });
}
