import type { Stats } from 'node:fs';
import { lstat, stat } from 'node:fs/promises';
import { MetisError } from '../errors.js';

/**
 * Whose config metis trusts (issue 34, observation 1): a file, or a folder searched for one, must belong
 * to this user or to root, and neither its group nor others may write it. This is ssh's rule for
 * ~/.ssh/config and git's for `safe.directory`: a setting another account could have written would let
 * that account choose the server's token, its confirmation policy, or where clients send the token.
 */

/** Write bits for group and others: anyone they cover could change what metis loads. */
const WRITABLE_BY_OTHERS = 0o022;

/** This process's uid, or null where there are none (Windows: its ACLs are not checked here). */
export function currentUid(): number | null {
  return typeof process.getuid === 'function' ? process.getuid() : null;
}

/** `mode 0666`, `mode 1777`: the permission bits as `ls -l` users and chmod read them. */
export function octalMode(mode: number): string {
  return `mode ${(mode & 0o7777).toString(8).padStart(4, '0')}`;
}

function whoCanWrite(mode: number): string {
  if ((mode & WRITABLE_BY_OTHERS) === WRITABLE_BY_OTHERS) return 'its group and others';
  return mode & 0o002 ? 'others' : 'its group';
}

/** Root could change any file anyway, so a root-owned file adds no one (ssh accepts it too). */
function foreignOwner(uid: number, mine: number): string | null {
  return uid === mine || uid === 0 ? null : `owned by uid ${uid}, not by you (uid ${mine}) or root`;
}

/**
 * Why someone other than this user (or root) could have put what is in this file or folder there
 * (`owned by uid 65534, ...`, `writable by others (mode 0666)`, or both), or null when no one could.
 */
export function untrustedReason(stats: Stats, mine: number): string | null {
  const reasons = [foreignOwner(stats.uid, mine)];
  if ((stats.mode & WRITABLE_BY_OTHERS) !== 0)
    reasons.push(`writable by ${whoCanWrite(stats.mode)} (${octalMode(stats.mode)})`);
  const found = reasons.filter((reason) => reason !== null);
  return found.length === 0 ? null : found.join(', and ');
}

/** The refusal of a config file: the file, the reason, and what to do. */
export function configRefused(path: string, reason: string, hint: string): MetisError {
  return new MetisError('METIS_ERR_CONFIG_INVALID', `refusing config ${path}: ${reason}`, { hint });
}

const NOT_YOURS_HINT =
  'metis loads only config files you (or root) own, as ssh does. If the file is yours, chown it to ' +
  'yourself; if not, remove it, or pass --config with a file of your own.';
const WRITABLE_HINT =
  'metis loads only config files no one else can write, as ssh does: chmod go-w the file, or pass ' +
  '--config with a file only you can write.';

/**
 * Throws unless `path` is a file only this user (or root) can have written: owned by them and not
 * writable by its group or others. A symlink is judged twice: the link itself must be theirs (whoever
 * owns it chose where it points), and so must the file it points at. File-system errors (ENOENT...)
 * are thrown as they are, for the caller to word.
 * @throws MetisError METIS_ERR_CONFIG_INVALID naming the file and the reason
 */
export async function assertOwnConfigFile(path: string): Promise<void> {
  const mine = currentUid();
  if (mine === null) return;
  const link = await lstat(path);
  const isLink = link.isSymbolicLink();
  const linkOwner = isLink ? foreignOwner(link.uid, mine) : null;
  if (linkOwner !== null) throw configRefused(path, `it is a symlink ${linkOwner}`, NOT_YOURS_HINT);
  const target = isLink ? await stat(path) : link;
  const reason = untrustedReason(target, mine);
  if (reason === null) return;
  throw configRefused(
    path,
    isLink ? `it points at a file ${reason}` : `it is ${reason}`,
    foreignOwner(target.uid, mine) === null ? WRITABLE_HINT : NOT_YOURS_HINT,
  );
}
