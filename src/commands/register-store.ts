import { type Command, Option } from 'commander';
import { SENSITIVITIES } from '../core/events/envelope.js';
import { CONFIG_HELP, DB_HELP } from './database-option.js';
import { STORE_HELP } from './store-option.js';

/** The `trace` command group, shared with other `trace ...` subcommands if one registered it first. */
function traceGroup(program: Command): Command {
  return (
    program.commands.find((c) => c.name() === 'trace') ??
    program.command('trace').description('inspect and maintain the trace store')
  );
}

/**
 * Registers the trace store maintenance commands: `trace prune`, `trace stats`, `backup`, `restore`
 * and `export`. Each action imports its module only when it runs.
 */
export function registerStoreCommands(program: Command): void {
  const trace = traceGroup(program);
  trace
    .command('prune')
    .description(
      'delete events older than the retention period in small batches; audit events are never deleted',
    )
    .option(
      '--days <n>',
      'delete events older than this many days, a positive integer (default: storage.retention_days of the config, 90)',
    )
    .option('--dry-run', 'print what would be deleted, by type, and change nothing')
    .option('--db <file>', DB_HELP)
    .option('--store <url>', STORE_HELP)
    .option('--config <file>', CONFIG_HELP)
    .option('--json', 'print the result (the trace.swept payload plus batches and by_type) as JSON')
    .action(async (options) => (await import('./trace-prune.js')).tracePruneCommand(options));

  trace
    .command('stats')
    .description('events by type and by session, sizes, oldest and newest event, schema version')
    .option('--db <file>', DB_HELP)
    .option('--config <file>', CONFIG_HELP)
    .option('--store <url>', STORE_HELP)
    .option('--json', 'print JSON (every session, not only the top 20)')
    .action(async (options) => (await import('./trace-stats.js')).traceStatsCommand(options));

  program
    .command('backup')
    .description('write a consistent snapshot of the database to a new file (safe while a server runs)')
    .argument('<dest>', 'backup file to create; must not exist (its folder must)')
    .option('--db <file>', DB_HELP)
    .option('--store <url>', `${STORE_HELP}; the backup is the same single SQLite file`)
    .option('--config <file>', CONFIG_HELP)
    .option('--json', 'print the backup metadata as JSON instead of key: value lines')
    .action(async (dest, options) => (await import('./backup.js')).backupCommand(dest, options));

  program
    .command('restore')
    .description('replace the database with a backup written by `metis backup` (stop the server first)')
    .argument('<src>', 'backup file to restore')
    .option('--db <file>', `database to replace or create; ${DB_HELP.replace('database file ', '')}`)
    .option('--store <url>', `restore into this PostgreSQL store instead (${STORE_HELP.split(' (')[0]})`)
    .option('--config <file>', CONFIG_HELP)
    .option('--force', 'replace an existing database (or the store a PostgreSQL database holds)')
    .option('--json', 'print the result as JSON instead of key: value lines')
    .action(async (src, options) => (await import('./restore.js')).restoreCommand(src, options));

  const store =
    program.commands.find((c) => c.name() === 'store') ??
    program.command('store').description('move a trace store between SQLite and PostgreSQL');
  store
    .command('copy')
    .description(
      'copy a whole trace store into a new one (SQLite file or postgres:// URL, either way), verified table by table and session by session',
    )
    .requiredOption(
      '--from <file|url>',
      'the store to copy: a SQLite file, or postgres://user:pass@host:port/db',
    )
    .requiredOption(
      '--to <file|url>',
      'the new store: a SQLite file that does not exist yet, or a PostgreSQL database without a metis store',
    )
    .option('--json', 'print {from, to, tables: [{name, rows}], sessions} as JSON')
    .action(async (options) => (await import('./store-copy.js')).storeCopyCommand(options));

  program
    .command('export')
    .description('stream stored events in id order as JSONL (one envelope per line) or CSV')
    .option('--session <id>', 'only events of this session')
    .option('--type <types...>', 'only these event types (repeat the flag or separate with commas)')
    .option('--since <iso|id>', 'events at or after an ISO timestamp, or after an event id (exclusive)')
    .option('--until <iso>', 'events at or before an ISO timestamp (inclusive)')
    .addOption(
      new Option(
        '--max-sensitivity <level>',
        'leave out events more private than this level: private < user_controlled < pseudonymous < aggregatable',
      ).choices([...SENSITIVITIES]),
    )
    .option('--audit', 'only audit event types (AUDIT_EVENT_TYPES)')
    .addOption(
      new Option(
        '--format <format>',
        'jsonl (one envelope per line, as stored) or csv (RFC 4180, with a header)',
      )
        .choices(['jsonl', 'csv'])
        .default('jsonl'),
    )
    .option('--out <file>', 'write to this new file (0600) instead of stdout; never overwrites')
    .option('--db <file>', DB_HELP)
    .option('--store <url>', STORE_HELP)
    .option('--config <file>', CONFIG_HELP)
    .action(async (options) => (await import('./export.js')).exportCommand(options));

  program
    .command('cluster')
    .description('the nodes of a metis cluster (several metis serve on one PostgreSQL store)')
    .command('status')
    .description(
      "list the cluster's nodes from its store: alive, stopped or silent, where each runs, its last beat",
    )
    .option(
      '--store <url>',
      `the cluster's store, ${STORE_HELP.split(', instead')[0]} (default $METIS_STORE_URL, then store.url)`,
    )
    .option('--config <file>', CONFIG_HELP)
    .option(
      '--json',
      'print JSON: {node_timeout_ms, nodes: [{node_id, state, url, host, pid, version, started_at, last_beat_at, stopped_at, backlog, shipped_at, sessions}], leases: [{session_id, node_id, held, since}]}',
    )
    .action(async (options) => (await import('./cluster-status.js')).clusterStatusCommand(options));
}
