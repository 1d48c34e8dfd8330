import type { Command } from 'commander';
import { CONFIG_HELP, DB_HELP } from './database-option.js';

const KEYSTORE_HELP =
  'keystore file (default: gateway.keystore of the config, else $METIS_HOME/gateway-keys.json)';

/**
 * `metis gateway issue-key|revoke-key|rotate-key|list-keys`: the keys that OpenAI and Anthropic SDKs
 * present to `metis serve`'s `/v1` routes (docs/gateway.md). Each action imports its module only when
 * it runs.
 */
export function registerGatewayCommands(program: Command): void {
  const gateway = program
    .command('gateway')
    .description('manage the keys of the OpenAI- and Anthropic-compatible gateway (/v1, docs/gateway.md)');
  const common = (command: Command) =>
    command
      .option('--keystore <file>', KEYSTORE_HELP)
      .option('--db <file>', `${DB_HELP}; the audit events are recorded there`)
      .option('--config <file>', CONFIG_HELP)
      .option('--json', 'print the result as JSON');

  common(
    gateway
      .command('issue-key')
      .description('issue a new gateway key; its secret is printed once and stored only as a hash')
      .requiredOption('--name <name>', 'a name for the key (who or what uses it), 1-200 characters')
      .option(
        '--models <list>',
        'comma-separated models the key may use, as provider:name or provider:* (default: any model)',
      )
      .option('--daily-usd <amount>', 'spend cap per UTC day in USD, e.g. 5 or 0.50 (default: none)')
      .option('--monthly-usd <amount>', 'spend cap per UTC month in USD (default: none)')
      .option('--user <id>', 'the user the key belongs to, e.g. usr_alice (quotas in gateway.users apply)')
      .option('--team <id>', 'the team the key belongs to, e.g. team_ml (quotas in gateway.teams apply)')
      .option('--workspace <dir>', "the workspace the key's sessions run in, for routing (default: here)"),
  ).action(async (options) => (await import('./gateway.js')).issueKeyCommand(options));

  common(
    gateway
      .command('revoke-key <key_id>')
      .description('revoke a gateway key (gk_…) at once; requests with it get 401'),
  ).action(async (keyId, options) => (await import('./gateway.js')).revokeKeyCommand(keyId, options));

  common(
    gateway
      .command('rotate-key <key_id>')
      .description(
        'issue a successor to a key with the same name, models, caps and identity; the old key works until the grace period ends',
      )
      .option(
        '--grace <duration>',
        'how long the old key keeps working: 0, 90s, 30m, 24h, 7d (default 24h)',
        '24h',
      ),
  ).action(async (keyId, options) => (await import('./gateway.js')).rotateKeyCommand(keyId, options));

  gateway
    .command('list-keys')
    .description('list the gateway keys (never their secrets): status, identity, models and caps')
    .option('--keystore <file>', KEYSTORE_HELP)
    .option('--db <file>', `${DB_HELP}; a lapsed rotation grace is recorded there`)
    .option('--config <file>', CONFIG_HELP)
    .option('--json', 'print the keys as a JSON array')
    .action(async (options) => (await import('./gateway.js')).listKeysCommand(options));
}
