import { type Command, Option } from 'commander';

/** `metis skills list|show|create|edit`. */
export function registerSkillsCommands(
  program: Command,
  client: { url: () => Option; token: () => Option },
): void {
  const skills = program
    .command('skills')
    .description('skills: $METIS_HOME/skills and .metis/skills of the workspace (the workspace wins)');
  const workspace = () => new Option('--workspace <dir>', 'the workspace (default: the current folder)');
  const readConfig = () =>
    new Option(
      '--config <file>',
      'config file giving runtime.skills (default: metis.config.* or .metisrc* found from here up)',
    );
  skills
    .command('list')
    .description('list the skills a session of the workspace gets (read here, no server needed)')
    .addOption(workspace())
    .addOption(readConfig())
    .option(
      '--json',
      'print { roots, budget_tokens, skills, shadowed, problems } (each skill: name, description, load, source, version, size_tokens, path)',
    )
    .action(async (options) => (await import('./skills.js')).skillsListCommand(options));
  skills
    .command('show <name>')
    .description('print one skill: the file that serves it, its description and body')
    .addOption(workspace())
    .addOption(readConfig())
    .option(
      '--json',
      'print the skill as JSON (name, description, load, version, body, path, source, size_tokens)',
    )
    .action(async (name, options) => (await import('./skills.js')).skillsShowCommand(name, options));

  const writeOptions = (command: Command, verb: 'create' | 'edit') =>
    command
      .addOption(workspace())
      .option(
        '--global',
        `${verb} the global skill (the server's $METIS_HOME/skills or runtime.skills.global_dir) instead of the workspace's`,
      )
      .option('--body <text>', "the skill's instructions: the text after the front matter")
      .option('--body-file <file>', 'read the body from a file (- for standard input)')
      .option('--force', 'write it even when the security scan blocks it (recorded as "blocked")')
      .option(
        '--json',
        'print { name, path, source, changed, size_tokens, scan, before_hash, after_hash, diff_size_bytes, event_id }',
      )
      .addOption(client.url())
      .addOption(client.token())
      .option(
        '--config <file>',
        'config file giving the server address and token, and runtime.skills for the editor (default: found from here up)',
      )
      .addHelpText(
        'after',
        '\nThe running server writes the file atomically and records the event (like `metis memory clear`);\n' +
          'with no server running, start `metis serve` first. Every text is scanned first for instructions to\n' +
          'send data away or run dangerous commands: a "blocked" text is refused unless --force, a "warning" is\n' +
          'written; the reasons are printed with their line numbers (docs/skills.md, "Security scan").\n' +
          'With neither --body nor --body-file, in a terminal with $VISUAL or $EDITOR set, the body opens there.',
      );

  writeOptions(
    skills
      .command('create <name>')
      .description('write a new .metis/skills/<name>/SKILL.md through the server (skill.created)')
      .option('--description <text>', 'one line: what the skill is for (required)')
      .option('--always', 'load it at the start of every session (default: on demand, through skill_load)'),
    'create',
  ).action(async (name, options) => (await import('./skills-write.js')).skillsCreateCommand(name, options));

  writeOptions(
    skills
      .command('edit <name>')
      .description(
        'change a skill through the server (skill.modified); what no flag gives stays as it was, comments and version included',
      )
      .option('--description <text>', 'the new description')
      .option('--always', 'load it at the start of every session from now on')
      .option('--on-demand', 'load it only when the model asks (skill_load)')
      .option('--reason <text>', 'why it changed, recorded in skill.modified (default "metis skills edit")'),
    'edit',
  ).action(async (name, options) => (await import('./skills-write.js')).skillsEditCommand(name, options));
}
