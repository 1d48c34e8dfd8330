import { readFileSync } from 'node:fs';

/** metis's version, from its package.json (two levels up from both src/core and dist/core). */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}
