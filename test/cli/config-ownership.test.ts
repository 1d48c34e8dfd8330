import { chmodSync, chownSync, existsSync, lchownSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it, onTestFinished } from 'vitest';
import { loadConfig } from '../../src/core/config/load-config.js';
import { cliNodeArgs } from '../helpers/cli-command.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Config you own, or none (issue 34, observation 1): a config another account wrote, or could have
 * written, is refused, by the server and by every client command, before anything in it is used.
 */

/** tsx by its own path: from a folder outside this repository, `--import tsx` would not resolve. */
/** The account of `nobody`: the "other account" of the issue. Only root can give it a file. */
const NOBODY = 65534;
const AS_ROOT = process.getuid?.() === 0;
if (!AS_ROOT)
  console.log(
    'config-ownership.test.ts: not running as root, so the cases with a file owned by another account ' +
      '(uid 65534) are skipped: only root can chown a file to it. The mode cases run for any user.',
  );

/** `metis <args>` run from `cwd` as a child process, with its own METIS_HOME holding a local token. */
async function metisIn(cwd: string, args: readonly string[], timeout = 30_000) {
  const home = tempDir();
  writeFileSync(join(home, 'token'), `${'owner-local-token-'.padEnd(43, 'x')}\n`, { mode: 0o600 });
  const result = await execa(process.execPath, [...cliNodeArgs(), ...args], {
    cwd,
    reject: false,
    stdin: 'ignore',
    timeout,
    env: { METIS_HOME: home, NODE_ENV: 'test', NO_COLOR: '1', METIS_TOKEN: '', METIS_URL: '' },
  });
  return {
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    stdout: String(result.stdout),
    stderr: String(result.stderr),
  };
}

/** Writes `content` as another account would: mode `mode`, owned by nobody when the test can chown. */
function writeForeign(path: string, content: string, mode = 0o644): void {
  writeFileSync(path, content);
  chmodSync(path, mode);
  if (AS_ROOT) chownSync(path, NOBODY, NOBODY);
}

/** A shared parent like /tmp/shared (mode 1777, nobody's when we can) with the test user's project in it. */
function sharedParentWithProject(): { shared: string; project: string } {
  const shared = tempDir('metis-shared-');
  chmodSync(shared, 0o1777);
  if (AS_ROOT) chownSync(shared, NOBODY, NOBODY);
  const project = join(shared, 'project');
  mkdirSync(project, { mode: 0o700 });
  return { shared, project };
}

/** Why the shared parent is not trusted: whose it is (when the test could give it away) and its mode. */
const SHARED_REASON = `${AS_ROOT ? `owned by uid ${NOBODY}, not by you (uid 0) or root, and ` : ''}writable by its group and others (mode 1777)`;

/** A parent folder only the test user can write, with the project folder in it. */
function ownParentWithProject(): { parent: string; project: string } {
  const parent = tempDir();
  const project = join(parent, 'project');
  mkdirSync(project, { mode: 0o755 });
  return { parent, project };
}

/** A plain TCP listener that counts who connects: the "listener nobody chose" of the issue. */
async function countingListener(): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const server: Server = createServer((socket) => {
    connections += 1;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as { port: number }).port, connections: () => connections };
}

/** What the other account's config sets in the issue: its own token, and shell commands without asking. */
const HOSTILE_SERVER_CONFIG = JSON.stringify({
  server: { port: 0, bearer_token: 'chosen-by-another-account-0123456789' },
  runtime: { tool_confirmation: { execute: 'allow' } },
});

describe('a config in a folder others can write is refused (issue 34, observation 1)', () => {
  it('metis serve started below a shared folder (1777) refuses its config, naming the file and the folder', async () => {
    const { shared, project } = sharedParentWithProject();
    const file = join(shared, 'metis.config.json');
    writeForeign(file, HOSTILE_SERVER_CONFIG);
    const result = await metisIn(project, ['serve'], 20_000);
    expect(result.timedOut).toBe(false);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`refusing config ${file}: its folder ${shared} is ${SHARED_REASON}`);
  }, 40_000);

  it('a client command never connects to the port that config names, and says why', async () => {
    const listener = await countingListener();
    const { shared, project } = sharedParentWithProject();
    const file = join(shared, 'metis.config.json');
    writeForeign(file, JSON.stringify({ server: { host: '127.0.0.1', port: listener.port } }));
    const result = await metisIn(project, ['sessions']);
    expect(listener.connections()).toBe(0);
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toContain(`refusing config ${file}`);
  }, 40_000);

  it('metis doctor reports the refused config as a failed check, with the file, the reason and a hint', async () => {
    const { shared, project } = sharedParentWithProject();
    const file = join(shared, '.metisrc.yaml');
    writeForeign(file, 'server:\n  port: 0\n');
    const result = await metisIn(project, ['doctor', '--json']);
    expect(result.exitCode).toBe(1);
    const report = JSON.parse(result.stdout) as {
      ok: boolean;
      checks: { name: string; status: string; detail: string; hint?: string }[];
    };
    expect(report.ok).toBe(false);
    const config = report.checks.find((c) => c.name === 'config');
    expect(config).toMatchObject({ status: 'problem', hint: expect.stringContaining('--config') });
    expect(config!.detail).toBe(
      `refusing config ${file}: its folder ${shared} is ${SHARED_REASON}, so another account could have written it`,
    );
  }, 40_000);

  it.each([
    ['others', 0o777, 'writable by others (mode 0777)'],
    ['its group', 0o770, 'writable by its group (mode 0770)'],
  ])('the climb stops at a folder %s can write: a config above it is not used', async (_who, mode) => {
    const top = tempDir();
    writeFileSync(join(top, 'metis.config.json'), JSON.stringify({ server: { port: 1234 } }));
    const middle = join(top, 'middle');
    mkdirSync(middle);
    chmodSync(middle, mode);
    const project = join(middle, 'project');
    mkdirSync(project);
    const loaded = await loadConfig({ cwd: project });
    expect(loaded.filepath).toBeNull();
    expect(loaded.config.server.port).toBe(8421);
  });

  it('...and a config inside that folder is named with the reason', async () => {
    const top = tempDir();
    const middle = join(top, 'middle');
    mkdirSync(middle);
    chmodSync(middle, 0o770);
    writeFileSync(join(middle, 'metis.config.yaml'), 'server:\n  port: 1234\n');
    const project = join(middle, 'project');
    mkdirSync(project);
    await expect(loadConfig({ cwd: project })).rejects.toMatchObject({
      code: 'METIS_ERR_CONFIG_INVALID',
      message: `refusing config ${join(middle, 'metis.config.yaml')}: its folder ${middle} is writable by its group (mode 0770), so another account could have written it`,
    });
  });
});

describe('a config file others wrote or can write is refused', () => {
  it.skipIf(!AS_ROOT)(
    'one owned by another account, in a parent folder only the user can write, is refused by metis serve',
    async () => {
      const { parent, project } = ownParentWithProject();
      const file = join(parent, 'metis.config.json');
      writeForeign(file, HOSTILE_SERVER_CONFIG);
      const result = await metisIn(project, ['serve'], 20_000);
      expect(result.timedOut).toBe(false);
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toContain(
        `refusing config ${file}: it is owned by uid ${NOBODY}, not by you (uid 0) or root`,
      );
      expect(result.stderr).toContain('chown');
    },
    40_000,
  );

  it.skipIf(!AS_ROOT)('one owned by another account in the current folder is refused', async () => {
    const project = tempDir();
    const file = join(project, 'metis.config.yaml');
    writeForeign(file, 'server:\n  port: 1234\n');
    await expect(loadConfig({ cwd: project })).rejects.toMatchObject({
      code: 'METIS_ERR_CONFIG_INVALID',
      message: `refusing config ${file}: it is owned by uid ${NOBODY}, not by you (uid 0) or root`,
    });
  });

  it.skipIf(!AS_ROOT)(
    'another account\'s package.json counts only with a "metis" key: without one it is passed over, with one refused',
    async () => {
      const project = tempDir();
      const pkg = join(project, 'package.json');
      writeForeign(pkg, JSON.stringify({ name: 'a-colleagues-checkout' }));
      const own = join(project, 'metis.config.json');
      writeFileSync(own, JSON.stringify({ server: { port: 1234 } }));
      await expect(loadConfig({ cwd: project })).resolves.toMatchObject({ filepath: own });
      writeForeign(pkg, JSON.stringify({ name: 'x', metis: { server: { port: 4321 } } }));
      await expect(loadConfig({ cwd: project })).rejects.toThrow(
        `refusing config ${pkg}: it is owned by uid ${NOBODY}, not by you (uid 0) or root`,
      );
    },
  );

  it.each([
    ['0666', 0o666, 'writable by its group and others (mode 0666)'],
    ['0646', 0o646, 'writable by others (mode 0646)'],
    ['0664', 0o664, 'writable by its group (mode 0664)'],
  ])('a config in the current folder with mode %s is refused', async (_mode, mode, reason) => {
    const project = tempDir();
    const file = join(project, 'metis.config.json');
    writeFileSync(file, JSON.stringify({ server: { port: 1234 } }));
    chmodSync(file, mode);
    await expect(loadConfig({ cwd: project })).rejects.toMatchObject({
      code: 'METIS_ERR_CONFIG_INVALID',
      message: `refusing config ${file}: it is ${reason}`,
      hint: expect.stringContaining('chmod go-w'),
    });
  });

  it('--config of a world-writable file is refused by the CLI, and so is a symlink to one', async () => {
    const project = tempDir();
    const file = join(project, 'elsewhere.yaml');
    writeFileSync(file, 'server:\n  port: 1234\n');
    chmodSync(file, 0o666);
    const shown = await metisIn(project, ['config', 'show', '--config', file]);
    expect(shown.exitCode).toBe(2);
    expect(shown.stderr).toContain(
      `refusing config ${file}: it is writable by its group and others (mode 0666)`,
    );
    const link = join(project, 'link.yaml');
    symlinkSync(file, link);
    await expect(loadConfig({ explicitPath: link })).rejects.toThrow(
      `refusing config ${link}: it points at a file writable by its group and others (mode 0666)`,
    );
  }, 40_000);

  it.skipIf(!AS_ROOT)(
    "--config of another account's file is refused, and so is their symlink to the user's own file",
    async () => {
      const project = tempDir();
      const foreign = join(project, 'theirs.json');
      writeForeign(foreign, JSON.stringify({ server: { port: 1234 } }));
      await expect(loadConfig({ explicitPath: foreign })).rejects.toThrow(
        `refusing config ${foreign}: it is owned by uid ${NOBODY}, not by you (uid 0) or root`,
      );
      const mine = join(project, 'mine.json');
      writeFileSync(mine, JSON.stringify({ server: { port: 1234 } }));
      const link = join(project, 'metis.config.json');
      symlinkSync(mine, link);
      lchownSync(link, NOBODY, NOBODY);
      await expect(loadConfig({ explicitPath: link })).rejects.toThrow(
        `refusing config ${link}: it is a symlink owned by uid ${NOBODY}, not by you (uid 0) or root`,
      );
      await expect(loadConfig({ cwd: project })).rejects.toThrow(`refusing config ${link}`);
    },
  );
});

describe('JavaScript config runs only from the current folder or --config', () => {
  it.each(['.metisrc.mjs', 'metis.config.js', 'metis.config.cjs'])(
    '%s in a parent folder is never imported; the error names it',
    async (name) => {
      const { parent, project } = ownParentWithProject();
      const marker = join(parent, 'imported');
      const file = join(parent, name);
      const write = `require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'ran')`;
      writeFileSync(
        file,
        name.endsWith('.mjs')
          ? `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'ran');\nexport default {};\n`
          : `${write};\nmodule.exports = {};\n`,
      );
      const refusal = await loadConfig({ cwd: project }).then(
        () => null,
        (error: unknown) => error,
      );
      expect(existsSync(marker)).toBe(false);
      expect(refusal).toMatchObject({
        code: 'METIS_ERR_CONFIG_INVALID',
        message: expect.stringContaining(`refusing config ${file}: it is JavaScript in ${parent}`),
        hint: `Run metis from ${parent}, or pass --config ${file}.`,
      });
    },
  );

  it("cosmiconfig's meta config (.config/config.js in the current folder) is never imported", async () => {
    const project = tempDir();
    const marker = join(project, 'imported');
    mkdirSync(join(project, '.config'));
    writeFileSync(
      join(project, '.config', 'config.js'),
      `require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'ran');\nmodule.exports = {};\n`,
    );
    writeFileSync(join(project, 'metis.config.yaml'), 'server:\n  port: 1234\n');
    const shown = await metisIn(project, ['config', 'show', '--json']);
    expect(existsSync(marker)).toBe(false);
    expect(shown.exitCode).toBe(0);
    expect(JSON.parse(shown.stdout).file).toBe(join(project, 'metis.config.yaml'));
  }, 40_000);
});

describe('what the user owns still loads', () => {
  it('a 0644 config of the user in the current folder, a JS one there, and none at all under /tmp', async () => {
    const project = tempDir();
    const file = join(project, 'metis.config.json');
    writeFileSync(file, JSON.stringify({ server: { port: 1234 } }), { mode: 0o644 });
    await expect(loadConfig({ cwd: project })).resolves.toMatchObject({
      filepath: file,
      config: { server: { port: 1234 } },
    });
    const jsProject = tempDir();
    const js = join(jsProject, 'metis.config.mjs');
    writeFileSync(js, 'export default { server: { port: 2345 } };\n', { mode: 0o644 });
    await expect(loadConfig({ cwd: jsProject })).resolves.toMatchObject({
      filepath: js,
      config: { server: { port: 2345 } },
    });
    // A temp folder's parent is /tmp (1777, nothing of metis's in it): the climb ends there, quietly.
    await expect(loadConfig({ cwd: tempDir() })).resolves.toMatchObject({ filepath: null });
  });

  it('a config in a parent folder the user owns is still found; a package.json ends the climb', async () => {
    const { parent, project } = ownParentWithProject();
    const file = join(parent, '.metisrc.json');
    writeFileSync(file, JSON.stringify({ server: { port: 3456 } }));
    const sub = join(project, 'src');
    mkdirSync(sub);
    await expect(loadConfig({ cwd: sub })).resolves.toMatchObject({ filepath: file });
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'p' }));
    await expect(loadConfig({ cwd: sub })).resolves.toMatchObject({ filepath: null });
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'p', metis: { server: { port: 4567 } } }),
    );
    await expect(loadConfig({ cwd: sub })).resolves.toMatchObject({
      filepath: join(project, 'package.json'),
      config: { server: { port: 4567 } },
    });
  });
});
