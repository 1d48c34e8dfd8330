import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 33 (skills): `metis skills list|show`, real child processes, METIS_HOME a temp folder. */

function writeSkill(root: string, name: string, text: string): string {
  mkdirSync(join(root, name), { recursive: true });
  const path = join(root, name, 'SKILL.md');
  writeFileSync(path, text);
  return path;
}

function setup() {
  const home = tempDir();
  const config = join(home, 'metis.config.json');
  writeFileSync(config, JSON.stringify({ runtime: { skills: { budget_tokens: 1234 } } }));
  const workspace = tempDir('metis-ws-');
  return {
    home,
    config,
    workspace,
    global: join(home, 'skills'),
    local: join(workspace, '.metis', 'skills'),
  };
}

describe('metis skills', () => {
  it('list and show: the workspace skill over the global one ($METIS_HOME/skills)', async () => {
    const { home, config, workspace, global, local } = setup();
    const hidden = writeSkill(global, 'style', '---\nname: style\ndescription: global style\n---\nGLOBAL\n');
    const mine = writeSkill(
      local,
      'style',
      '---\nname: style\ndescription: our style\nload: always\n---\nOURS\n',
    );
    writeSkill(
      global,
      'pdf-forms',
      '---\nname: pdf-forms\ndescription: fill PDF forms\nversion: 2\n---\nUse pdftk.\n',
    );
    const args = ['--workspace', workspace, '--config', config];

    const listed = await runCli(['skills', 'list', ...args, '--json'], home);
    expect(listed.exitCode, listed.stderr).toBe(0);
    const body = JSON.parse(listed.stdout);
    expect(body.budget_tokens).toBe(1234);
    expect(body.roots).toEqual({ workspace: local, global });
    expect(body.skills.map((s: any) => [s.name, s.source, s.load, s.path])).toEqual([
      ['pdf-forms', 'global', 'on_demand', join(global, 'pdf-forms', 'SKILL.md')],
      ['style', 'workspace', 'always', mine],
    ]);
    expect(body.skills[0].version).toBe('2');
    expect(body.shadowed).toEqual([hidden]);
    expect(body.problems).toEqual([]);

    const text = await runCli(['skills', 'list', ...args], home);
    expect(text.stdout).toContain('style  always  workspace');
    expect(text.stdout).toContain(`hidden by the workspace's skill of the same name: ${hidden}`);

    const shown = await runCli(['skills', 'show', 'style', ...args], home);
    expect(shown.exitCode, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(mine);
    expect(shown.stdout).toContain('OURS');
    expect(shown.stdout).not.toContain('GLOBAL');
  });

  it('a malformed SKILL.md or a missing skill is an error naming the file', async () => {
    const { home, config, workspace, local } = setup();
    const bad = writeSkill(local, 'broken', 'name: broken\ndescription: no front matter fence\n');
    writeSkill(local, 'fine', '---\nname: fine\ndescription: fine\n---\nbody\n');
    const args = ['--workspace', workspace, '--config', config];

    const listed = await runCli(['skills', 'list', ...args], home);
    expect(listed.exitCode).toBe(2);
    expect(listed.stdout).toContain('fine  on_demand  workspace');
    expect(listed.stderr).toContain(`skill file ${bad}: line 1 is not "---"`);

    const shown = await runCli(['skills', 'show', 'broken', ...args], home);
    expect(shown.exitCode).toBe(2);
    expect(shown.stderr).toContain(`skill file ${bad}`);

    const missing = await runCli(['skills', 'show', 'nope', ...args], home);
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr).toContain(join(local, 'nope', 'SKILL.md'));
    expect(missing.stderr).toContain(join(home, 'skills', 'nope', 'SKILL.md'));
  });
});
