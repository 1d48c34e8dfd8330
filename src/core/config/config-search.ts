import { stat } from 'node:fs/promises';
import { dirname, extname, join } from 'node:path';
import { assertOwnConfigFile, configRefused, currentUid, untrustedReason } from './config-trust.js';

/** The files metis looks for in each folder, in this order (cosmiconfig's order before issue 34). */
export const CONFIG_SEARCH_PLACES = [
  'package.json',
  '.metisrc',
  '.metisrc.json',
  '.metisrc.yaml',
  '.metisrc.yml',
  '.metisrc.js',
  '.metisrc.mjs',
  '.metisrc.cjs',
  'metis.config.json',
  'metis.config.yaml',
  'metis.config.yml',
  'metis.config.js',
  'metis.config.mjs',
  'metis.config.cjs',
] as const;

/** Loading these runs their code, so they are loaded only from where the user stands (or --config). */
const CODE_EXTENSIONS = new Set(['.js', '.mjs', '.cjs']);

/** A folder holding one of these is a project's root: the search goes no higher (as cosmiconfig's did). */
const PROJECT_ROOT_FILES = ['package.json', 'package.yaml'];

/** A regular file, following symlinks; anything else (missing, a folder, a FIFO) is not a candidate. */
async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The search ends at a folder others can write; a config there would have been used before issue 34,
 * so it is named rather than passed over: defaults the user did not expect are the worse surprise.
 * package.json is left out: in a shared folder it is rarely metis's, and it is not read to find out.
 */
async function refuseAnyConfigIn(folder: string, reason: string, start: string): Promise<void> {
  for (const place of CONFIG_SEARCH_PLACES.slice(1)) {
    const path = join(folder, place);
    if (await isFile(path))
      throw configRefused(
        path,
        `its folder ${folder} is ${reason}, so another account could have written it`,
        `metis climbs only through folders that only you (or root) can write. Remove the file if it is not yours, put your config in ${start}, or pass --config <file>.`,
      );
  }
}

/**
 * The config files to try, best first: in `start`, then in each folder above it up to the first that
 * holds a package.json (or package.yaml). Only folders this user (or root) owns and no one else can
 * write are climbed into; at the first other one the search ends. Found by stat alone: nothing is read
 * here, so nothing is imported before it is judged. The caller loads each candidate in turn and stops
 * at the first that holds a config (a package.json without a `metis` key, or an empty file, does not).
 * A package.json is the one candidate passed on unjudged: most are not metis's, reading JSON runs no
 * code, and the caller judges it only when it holds a `metis` key (a colleague's checkout stays usable).
 * @throws MetisError METIS_ERR_CONFIG_INVALID, naming the file, for a candidate that is not the user's
 *   or that others can write, a config in the first folder others can write, and a JavaScript config
 *   above `start`.
 */
export async function* configCandidates(start: string): AsyncGenerator<string> {
  const mine = currentUid();
  let dir = start;
  for (;;) {
    for (const place of CONFIG_SEARCH_PLACES) {
      const path = join(dir, place);
      if (!(await isFile(path))) continue;
      if (place !== 'package.json') await assertOwnConfigFile(path);
      if (dir !== start && CODE_EXTENSIONS.has(extname(place)))
        throw configRefused(
          path,
          `it is JavaScript in ${dir}, above the current folder ${start}; metis runs a JavaScript config only from the current folder or --config`,
          `Run metis from ${dir}, or pass --config ${path}.`,
        );
      yield path;
    }
    if ((await Promise.all(PROJECT_ROOT_FILES.map((f) => exists(join(dir, f))))).some(Boolean)) return;
    const parent = dirname(dir);
    if (parent === dir) return;
    if (mine !== null) {
      // A folder that cannot even be examined cannot be vouched for: the search ends there.
      const folder = await stat(parent).catch(() => null);
      if (folder === null) return;
      const reason = untrustedReason(folder, mine);
      if (reason !== null) {
        await refuseAnyConfigIn(parent, reason, start);
        return;
      }
    }
    dir = parent;
  }
}
