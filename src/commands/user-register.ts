import type { Command } from 'commander';
import { CONFIG_HELP, DB_HELP } from './database-option.js';

/**
 * `metis user export|forget <user_id>`: one user's data (the `user_id` a gateway key carries), for a
 * data-subject access request and the right to be forgotten. Each action imports its module when it runs.
 */
export function registerUserCommands(program: Command): void {
  const user = program
    .command('user')
    .description("one user's data in the trace store: export it, or forget it (docs/storage.md)");
  user
    .command('export <user_id>')
    .description(
      "write every event of the user's sessions and every other event naming them, as metis export does; records analytics.user_exported",
    )
    .option('--format <format>', 'jsonl (default) or csv')
    .option('--out <file>', 'write to this new file (mode 0600) instead of stdout')
    .option('--db <file>', DB_HELP)
    .option('--store <url>', 'a PostgreSQL store: refused for now (SQLite only)')
    .option('--config <file>', CONFIG_HELP)
    .action(async (userId, options) => (await import('./user-data.js')).userExportCommand(userId, options));
  user
    .command('forget <user_id>')
    .description(
      "delete the user's events (audit types kept), messages and tool calls, beside a running server too; records analytics.user_forgotten",
    )
    .option('--yes', 'confirm: the deletion cannot be undone')
    .option('--json', 'print what was deleted as JSON')
    .option('--db <file>', DB_HELP)
    .option('--store <url>', 'a PostgreSQL store: refused for now (SQLite only)')
    .option('--config <file>', CONFIG_HELP)
    .action(async (userId, options) => (await import('./user-data.js')).userForgetCommand(userId, options));
}
