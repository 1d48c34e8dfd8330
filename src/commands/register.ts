import type { Command } from 'commander';
import { registerStoreCommands } from './register-store.js';

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

  program
    .command('serve')
    .description('run the event bus, trace store, agent runtime and streaming server')
    .option('--host <host>', 'address to bind (default 127.0.0.1; others need server.bearer_token)')
    .option('--port <port>', 'port to listen on (default 8421; 0 picks a free port)')
    .option('--db <file>', 'database file (default $METIS_HOME/metis.db, ~/.metis/metis.db)')
    .option('--model <model>', 'default model as provider:name (default scripted:demo)')
    .option('--config <file>', 'config file (default: metis.config.* or .metisrc* found from here up)')
    .option('--json', 'print the startup line as JSON (url, db, config)')
    .action(async (options) => (await import('./serve.js')).serveCommand(options));

  registerStoreCommands(program);
}
