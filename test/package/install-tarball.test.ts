import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';

const ROOT = join(import.meta.dirname, '../..');
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** What `npm pack` builds from: the package's own files and what its `prepare` (the build) reads. */
const SOURCES = [
  'package.json',
  'package-lock.json',
  'README.md',
  'tsconfig.json',
  'tsconfig.build.json',
  'bin',
  'src',
  'dashboard',
  'test/streaming-conformance',
];

/** Why the registry cannot be used (the test is then skipped with it), or null when it answers. */
async function registryUnreachable(): Promise<string | null> {
  const ping = await execa('npm', ['ping'], { reject: false, timeout: 30_000, stdin: 'ignore' });
  if (ping.exitCode === 0) return null;
  const said = String(ping.stderr).trim().split('\n').at(-1) ?? '';
  return `the npm registry is unreachable (npm ping: ${ping.timedOut ? 'timed out' : said})`;
}

/**
 * better-sqlite3's binding, as the prebuilt binary its install script (prebuild-install) looks for
 * first in a local folder, before downloading one from GitHub and before compiling from source: the
 * install runs for real, without spending minutes compiling SQLite when GitHub is out of reach.
 */
async function localPrebuild(tmp: string): Promise<Record<string, string>> {
  const module = join(ROOT, 'node_modules/better-sqlite3');
  const { version } = JSON.parse(readFileSync(join(module, 'package.json'), 'utf8')) as { version: string };
  const folder = join(tmp, 'prebuilds');
  mkdirSync(folder);
  const name = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`;
  await execa('tar', ['-czf', join(folder, name), '-C', module, 'build/Release/better_sqlite3.node']);
  return { npm_config_better_sqlite3_local_prebuilds: folder };
}

/** The newest modification time of the files under `folder`, in ms. */
function newestIn(folder: string): number {
  return readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .reduce((newest, entry) => Math.max(newest, statSync(join(entry.parentPath, entry.name)).mtimeMs), 0);
}

/** Whether dist/ was built after the last change to the sources (so packing it is packing them). */
function builtFromTheseSources(): boolean {
  const cli = join(ROOT, 'dist/cli.js');
  if (!existsSync(cli) || !existsSync(join(ROOT, 'dist/dashboard'))) return false;
  const builtAt = statSync(cli).mtimeMs;
  return newestIn(join(ROOT, 'src')) <= builtAt && newestIn(join(ROOT, 'dashboard/src')) <= builtAt;
}

/** npm with the flags of a quiet install that uses the local cache first. */
function npm(args: readonly string[], cwd: string, env: Record<string, string>) {
  return execa('npm', [...args, '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd,
    env,
    extendEnv: false,
    reject: false,
    stdin: 'ignore',
    timeout: 150_000,
  });
}

/**
 * How this machine reaches the registry (its proxy, the certificates it trusts): passed on, or npm
 * fails where `npm ping` in the suite's own environment succeeds (a package whose metadata is not in the
 * cache yet is fetched through them).
 */
const NETWORK_ENV = [
  'NODE_EXTRA_CA_CERTS',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'HTTPS_PROXY',
  'https_proxy',
  'HTTP_PROXY',
  'http_proxy',
  'NO_PROXY',
  'no_proxy',
];

/** A child's environment: the PATH given (then node's folder, the system's), nothing of the suite's. */
function childEnv(tmp: string, path: readonly string[] = [], extra: Record<string, string> = {}) {
  const network = Object.fromEntries(
    NETWORK_ENV.flatMap((name) => (process.env[name] === undefined ? [] : [[name, process.env[name]!]])),
  );
  return {
    ...network,
    PATH: [...path, dirname(process.execPath), '/usr/local/bin', '/usr/bin', '/bin'].join(':'),
    HOME: process.env.HOME ?? tmp,
    METIS_HOME: join(tmp, 'metis-home'),
    NO_COLOR: '1',
    npm_config_update_notifier: 'false',
    ...extra,
  };
}

describe('the npm package (issue 29, point 5)', () => {
  it('npm pack, then npm install -g <tarball>: metis demo runs from any folder; in a project that depends on it, npx metis does', async (ctx) => {
    const unreachable = await registryUnreachable();
    if (unreachable !== null) {
      console.warn(`skipped: ${unreachable}`);
      ctx.skip();
    }
    const tmp = tempDir('metis-package-');
    // Packed from a copy of the sources: `prepare`, when it runs, builds into the copy's dist/, never
    // into the one beside the running suite.
    const source = join(tmp, 'source');
    for (const path of SOURCES) cpSync(join(ROOT, path), join(source, path), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules'), join(source, 'node_modules'), 'dir');
    // Built already (CI's `npm ci` ran `prepare` on the clone): packed as built, not built a second time.
    const built = builtFromTheseSources();
    if (built) cpSync(join(ROOT, 'dist'), join(source, 'dist'), { recursive: true });
    const pack = await npm(
      ['pack', '--pack-destination', tmp, ...(built ? ['--ignore-scripts'] : [])],
      source,
      childEnv(tmp),
    );
    expect(pack.exitCode, String(pack.stderr)).toBe(0);
    const tarball = join(tmp, `metis-${VERSION}.tgz`);
    expect(readdirSync(tmp)).toContain(`metis-${VERSION}.tgz`);
    const prebuilt = await localPrebuild(tmp);

    // Globally, into a prefix of the test's own.
    const prefix = join(tmp, 'global');
    const global = await npm(
      ['install', '-g', '--prefix', prefix, tarball],
      tmp,
      childEnv(tmp, [], prebuilt),
    );
    expect(global.exitCode, String(global.stderr)).toBe(0);
    expect(String(global.stderr)).not.toContain('EBADENGINE');
    const elsewhere = join(tmp, 'elsewhere');
    mkdirSync(elsewhere);
    const onPath = childEnv(tmp, [join(prefix, 'bin')]);
    const version = await execa('metis', ['--version'], { cwd: elsewhere, env: onPath, extendEnv: false });
    expect(String(version.stdout).trim()).toBe(VERSION);
    const demo = await execa('metis', ['demo'], {
      cwd: elsewhere,
      env: onPath,
      extendEnv: false,
      reject: false,
      timeout: 60_000,
    });
    expect(demo.exitCode, String(demo.stderr)).toBe(0);
    expect(String(demo.stdout)).toContain('■ turn done');
    // The commands it suggests are the ones that work here: metis is on the PATH.
    expect(String(demo.stdout)).toContain('\n  metis serve ');
    expect(String(demo.stdout)).not.toContain('not on your PATH');

    // In a project of the user's that depends on it: npx metis finds it there.
    const project = join(tmp, 'project');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'my-project', private: true }));
    const local = await npm(['install', tarball], project, childEnv(tmp, [], prebuilt));
    expect(local.exitCode, String(local.stderr)).toBe(0);
    expect(String(local.stderr)).not.toContain('EBADENGINE');
    const inProject = childEnv(tmp);
    const npxVersion = await execa('npx', ['metis', '--version'], {
      cwd: project,
      env: inProject,
      extendEnv: false,
    });
    expect(String(npxVersion.stdout).trim()).toBe(VERSION);
    const npxDemo = await execa('npx', ['metis', 'demo'], {
      cwd: project,
      env: inProject,
      extendEnv: false,
      reject: false,
      timeout: 60_000,
    });
    expect(npxDemo.exitCode, String(npxDemo.stderr)).toBe(0);
    expect(String(npxDemo.stdout)).toContain('\n  npx metis serve ');
  }, 420_000);
});
