import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Issue 29, point 5, what can be checked without installing anything: the Node versions the README
 * states against `engines` and the lockfile, and the one-container image (no Docker daemon needed).
 */

const ROOT = join(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const pkg = JSON.parse(read('package.json')) as { version: string; engines: { node: string } };

type Version = readonly [number, number, number];

function compare(a: Version, b: Version): number {
  for (let i = 0; i < 3; i += 1) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return 0;
}

/**
 * Whether `version` satisfies a node-semver range of the kinds `engines.node` fields use: `||`
 * alternatives of space-separated comparators (`>=`, `>`, `<=`, `<`, `=`, `^`, `~`, x-ranges, `*`).
 */
function satisfies(version: Version, range: string): boolean {
  return range.split('||').some((part) => {
    const tokens = part
      .trim()
      .replace(/(>=|<=|>|<|=|\^|~)\s+/g, '$1')
      .split(/\s+/)
      .filter((t) => t !== '');
    return tokens.every((token) => comparator(version, token));
  });
}

function comparator(version: Version, token: string): boolean {
  if (token === '*' || token === 'x') return true;
  const m = /^(>=|<=|>|<|=|\^|~)?v?(\d+|x|\*)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?/.exec(token);
  if (m === null) throw new Error(`cannot read the range "${token}"`);
  const parts = [m[2], m[3], m[4]].filter((p) => p !== undefined && /^\d+$/.test(p)).map(Number);
  const low: Version = [parts[0] ?? 0, parts[1] ?? 0, parts[2] ?? 0];
  const at = compare(version, low);
  switch (m[1]) {
    case '>=':
      return at >= 0;
    case '>':
      return at > 0;
    case '<=':
      return at <= 0;
    case '<':
      return at < 0;
    case '^':
      return at >= 0 && version[0] === low[0];
    case '~':
      return at >= 0 && version[0] === low[0] && (parts.length < 2 || version[1] === low[1]);
    default:
      return parts.every((p, i) => version[i] === p);
  }
}

function versionOf(text: string): Version {
  const [major = 0, minor = 0, patch = 0] = text.split('.').map(Number);
  return [major, minor, patch];
}

interface Locked {
  readonly version?: string;
  readonly dev?: boolean;
  readonly optional?: boolean;
  readonly engines?: { node?: string } | string[];
}

describe('the Node versions the README states', () => {
  const readme = read('README.md');
  const toRun = /Node\.js ≥ (\d+\.\d+) to run/.exec(readme)?.[1];
  const toBuild = /Node\.js ≥ (\d+\.\d+) to build it from a\s+clone/.exec(readme)?.[1];
  const locked = Object.entries(
    (JSON.parse(read('package-lock.json')) as { packages: Record<string, Locked> }).packages,
  ).filter(([path, p]) => path !== '' && typeof p.engines === 'object' && !Array.isArray(p.engines));

  it('running metis: the README says what engines says, and every package it installs accepts that Node (no EBADENGINE)', () => {
    expect(toRun).toBeDefined();
    expect(pkg.engines.node).toBe(`>=${toRun}`);
    const refusing = locked
      .filter(([, p]) => p.dev !== true)
      .filter(([, p]) => !satisfies(versionOf(toRun!), (p.engines as { node?: string }).node ?? '*'))
      .map(([path, p]) => `${path}@${p.version}: ${(p.engines as { node: string }).node}`);
    expect(refusing).toEqual([]);
  });

  it('building from a clone: every locked package, the development ones too, accepts the Node the README names', () => {
    expect(toBuild).toBeDefined();
    const refusing = locked
      .filter(([, p]) => !satisfies(versionOf(toBuild!), (p.engines as { node?: string }).node ?? '*'))
      .map(([path, p]) => `${path}@${p.version}: ${(p.engines as { node: string }).node}`);
    expect(refusing).toEqual([]);
  });

  it('the range reader reads the ranges the lockfile holds as node-semver does', () => {
    expect(satisfies([20, 12, 0], '>=22')).toBe(false);
    expect(satisfies([20, 12, 0], '^20.19.0 || >=22.12.0')).toBe(false);
    expect(satisfies([20, 19, 0], '^20.19.0 || >=22.12.0')).toBe(true);
    expect(satisfies([20, 12, 0], '>= 18.x')).toBe(true);
    expect(satisfies([20, 12, 0], '20.x || 22.x')).toBe(true);
    expect(satisfies([20, 12, 0], '^10 || ^12 || >=14')).toBe(true);
    expect(satisfies([20, 12, 0], '~20.11.0')).toBe(false);
  });

  it("the README's install line names the tarball npm pack makes", () => {
    expect(readme).toContain(`npm install -g ./metis-${pkg.version}.tgz`);
  });
});

describe('the one-container image (deploy/Dockerfile)', () => {
  const dockerfile = read('deploy/Dockerfile');
  const instructions = dockerfile
    .replace(/\\\n/g, ' ')
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.trimStart().startsWith('#'));
  const runtime = instructions.slice(instructions.findLastIndex((line) => line.startsWith('FROM ')));

  it('builds: the install before the sources are copied runs no `prepare` (a build with no sources)', () => {
    const install = instructions.findIndex((line) => /\bnpm ci\b/.test(line));
    const copyAll = instructions.findIndex((line) => /^COPY \. \./.test(line));
    expect(install).toBeGreaterThan(-1);
    expect(install).toBeLessThan(copyAll);
    expect(instructions[install]).toContain('--ignore-scripts');
    // The SQLite binding is still built, as its install script would have.
    expect(instructions[install]).toMatch(/npm rebuild better-sqlite3/);
    expect(instructions.slice(copyAll).some((line) => /npm run build/.test(line))).toBe(true);
  });

  it('runs metis serve on the embedded SQLite store, its data in a volume, on the exposed port', () => {
    // No store or broker set in the image (compose.yaml sets them for its cluster): the SQLite file.
    expect(instructions.join('\n')).not.toMatch(/METIS_STORE_URL|METIS_NATS_URL|postgres:\/\//);
    expect(runtime).toContain('ENV METIS_HOME=/var/lib/metis');
    expect(runtime).toContain('VOLUME /var/lib/metis');
    expect(runtime).toContain('EXPOSE 8421');
    expect(runtime).toContain('ENTRYPOINT ["node", "bin/metis.js"]');
    expect(runtime).toContain('CMD ["serve", "--host", "0.0.0.0"]');
    // What the runtime stage copies is what bin/metis.js needs: the build, its modules, package.json.
    for (const path of ['package.json', 'node_modules', 'bin', 'dist'])
      expect(runtime.some((line) => line.startsWith(`COPY --from=build /metis/${path} `))).toBe(true);
  });

  it('the README runs it with a token (a non-loopback bind needs one) and the port published', () => {
    const readme = read('README.md');
    expect(readme).toContain('docker build -f deploy/Dockerfile -t metis .');
    const run = readme.split('\n').find((line) => line.trim().startsWith('docker run '));
    expect(run).toBeDefined();
    expect(run).toContain('-e METIS_TOKEN');
    expect(run).toMatch(/-p (127\.0\.0\.1:)?8421:8421/);
    expect(run).toContain('-v metis-data:/var/lib/metis');
  });
});
