import type { Command } from 'commander';

/**
 * Registers every command. Each action imports its module only when it runs, so one command never
 * loads another's dependencies (the SQLite binding, the server).
 */
export function registerCommands(program: Command): void {
  program
    .command('catalog')
    .description('print the event contract: every catalog and streaming-only event type')
    .option('--json', 'print JSON (one object with a `types` array) instead of a table')
    .option('--domain <domain>', 'only types of this domain, e.g. tool, route, message')
    .option('--type <type>', "one type, with its payload's fields (JSON Schema)")
    .action(async (options) => (await import('./catalog.js')).catalogCommand(options));
}
