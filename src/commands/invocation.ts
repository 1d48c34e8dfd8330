import { accessSync, constants, realpathSync } from 'node:fs';
import { basename, delimiter, dirname, isAbsolute, join, relative } from 'node:path';
import { packageVersion } from '../core/version.js';

/** How the user can run metis again from where they are, for the commands a command suggests. */
export interface Invocation {
  /** What to type before a command's arguments: `metis`, `npx metis` or `node <launcher>`. */
  readonly prefix: string;
  /** How to put `metis` on the PATH, when it is not there; null when it is. */
  readonly hint: string | null;
}

function realpathOrNull(path: string): string | null {
  try {
    return realpathSync(path);
  } catch {
    return null;
  }
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The command that runs this metis again, as the user's shell would find it:
 *
 * - a `metis` on the PATH that is this launcher (a global install, `npm link`): `metis`;
 * - one only in a `node_modules/.bin` folder, which npm puts on the PATH of what `npx` / `npm exec`
 *   runs (a project that depends on metis, the npx cache): `npx metis`, which works there;
 * - otherwise (`node bin/metis.js` from a clone, say): `node <launcher>`, and how to get `metis` on
 *   the PATH.
 */
export function invocation(
  launcher: string | undefined = process.argv[1],
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): Invocation {
  const self = launcher === undefined ? null : realpathOrNull(launcher);
  const names = process.platform === 'win32' ? ['metis.cmd', 'metis.exe', 'metis'] : ['metis'];
  let viaNpx = false;
  for (const folder of (env.PATH ?? '').split(delimiter)) {
    if (folder === '' || !isAbsolute(folder)) continue;
    for (const name of names) {
      const candidate = join(folder, name);
      if (!executable(candidate)) continue;
      // A wrapper script (Windows .cmd) cannot be resolved to the launcher: take its word.
      if (self !== null && name === 'metis' && realpathOrNull(candidate) !== self) continue;
      if (basename(folder) === '.bin' && basename(dirname(folder)) === 'node_modules') viaNpx = true;
      else return { prefix: 'metis', hint: null };
    }
  }
  if (viaNpx) return { prefix: 'npx metis', hint: null };
  if (launcher === undefined) return { prefix: 'metis', hint: null };
  const shown = relative(cwd, launcher);
  const path = shown.startsWith('..') || isAbsolute(shown) ? launcher : shown;
  return {
    prefix: `node ${/\s/.test(path) ? JSON.stringify(path) : path}`,
    hint: `metis is not on your PATH; to put it there: npm pack, then npm install -g ./metis-${packageVersion()}.tgz (README.md, "Start here")`,
  };
}
