import { realpath } from 'node:fs/promises';
import path from 'node:path';

/** Where a path a tool was given really leads, and whether that is inside the session's workspace. */
export interface ResolvedPath {
  /** The path exactly as the model gave it. */
  readonly given: string;
  /** The workspace folder with every symlink resolved. */
  readonly workspace: string;
  /**
   * The file's real path: symlinks, `.` and `..` resolved by the kernel's `realpath`. When the full
   * path does not resolve (a missing file, a symlink loop, a folder without search permission), the
   * real path of its nearest existing ancestor joined with the rest: that ancestor decides where the
   * path leads, so a missing file under a symlink that points outside is outside.
   */
  readonly real: string;
  /** Why the full path did not resolve (ENOENT, ENOTDIR, ELOOP, EACCES, ...); null when `real` exists. */
  readonly failure: NodeJS.ErrnoException | null;
  /** `real` is the workspace or below it. */
  readonly insideWorkspace: boolean;
}

/**
 * Resolves `given` against `workspacePath` the way the kernel would open it. A relative path is
 * appended to the workspace without lexical clean-up, so `link/../x` follows `link` first, as `open`
 * does; an absolute path is taken as is; `..` above the root stays at the root.
 */
export async function resolveInWorkspace(given: string, workspacePath: string): Promise<ResolvedPath> {
  const workspace = (await realPathLenient(path.resolve(workspacePath))).real;
  const raw = path.isAbsolute(given) ? given : `${path.resolve(workspacePath)}${path.sep}${given}`;
  const { real, failure } = await realPathLenient(raw);
  return { given, workspace, real, failure, insideWorkspace: isWithin(real, workspace) };
}

/** `candidate` is `folder` itself or somewhere below it (both real, absolute paths). */
export function isWithin(candidate: string, folder: string): boolean {
  if (candidate === folder) return true;
  const prefix = folder.endsWith(path.sep) ? folder : `${folder}${path.sep}`;
  return candidate.startsWith(prefix);
}

/**
 * The real path of `target`, or of its nearest existing ancestor joined with the components that
 * did not resolve (lexically: they do not exist, so no symlink among them can lead anywhere else).
 */
export async function realPathLenient(
  target: string,
): Promise<{ real: string; failure: NodeJS.ErrnoException | null }> {
  try {
    return { real: await realpath(target), failure: null };
  } catch (error) {
    const failure = asErrno(error);
    const rest: string[] = [];
    let head = target;
    for (;;) {
      const parent = path.dirname(head);
      if (parent === head) return { real: path.resolve(target), failure };
      rest.unshift(path.basename(head));
      head = parent;
      try {
        return { real: path.resolve(await realpath(head), ...rest), failure };
      } catch {
        // keep climbing: this ancestor does not resolve either
      }
    }
  }
}

function asErrno(error: unknown): NodeJS.ErrnoException {
  if (error instanceof Error) return error as NodeJS.ErrnoException;
  return Object.assign(new Error(String(error)), { code: 'EUNKNOWN' });
}
