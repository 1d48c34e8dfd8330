import { loadConfig } from '../core/config/load-config.js';
import { graceMsOf, type IssueFlags, issueOptionsOf, keyIdOf } from '../core/gateway/admin-input.js';
import {
  type AdminEvent,
  issueKey,
  type KeyView,
  listKeys,
  revokeKey,
  rotateKey,
} from '../core/gateway/key-admin.js';
import { keystorePath } from '../core/gateway/keystore.js';
import { resolveDbPath } from '../core/store/paths.js';
import { recordSystemEvents } from '../core/store/system-handoff.js';
import { table } from './text-table.js';

interface CommonFlags {
  keystore?: string;
  db?: string;
  config?: string;
  json?: boolean;
}

async function placesOf(flags: CommonFlags): Promise<{ keystore: string; dbPath: string }> {
  const { config } = await loadConfig({ explicitPath: flags.config ?? null });
  return {
    keystore: flags.keystore ?? keystorePath(config.gateway.keystore),
    dbPath: resolveDbPath(flags.db ?? config.storage.database),
  };
}

/**
 * Records the change's audit events (bus §6.13) best effort: the keystore is written already and is
 * the record; a database that cannot take them now is said on stderr, and the command still succeeds.
 */
async function record(dbPath: string, events: readonly AdminEvent[]): Promise<void> {
  try {
    await recordSystemEvents(dbPath, events);
  } catch (error) {
    console.error(
      `warning: the keystore is updated, but its audit events could not be recorded in ${dbPath}: ${(error as Error).message}`,
    );
  }
}

export async function issueKeyCommand(flags: IssueFlags & CommonFlags): Promise<void> {
  const options = issueOptionsOf(flags);
  const { keystore, dbPath } = await placesOf(flags);
  const { value, events } = issueKey(keystore, options);
  await record(dbPath, events);
  if (flags.json) return console.log(JSON.stringify({ key: value.key, secret: value.secret }, null, 2));
  console.log(`issued ${value.key.id} (${value.key.name})`);
  console.log(`secret: ${value.secret}`);
  console.log('the secret is shown this once: metis keeps only its hash. Give it to the app as its API key.');
}

export async function revokeKeyCommand(keyId: string, flags: CommonFlags): Promise<void> {
  const id = keyIdOf(keyId);
  const { keystore, dbPath } = await placesOf(flags);
  const { value, events } = revokeKey(keystore, id);
  await record(dbPath, events);
  if (flags.json) return console.log(JSON.stringify(value, null, 2));
  console.log(`revoked ${value.id} (${value.name}) at ${value.revoked_at}`);
}

export async function rotateKeyCommand(keyId: string, flags: CommonFlags & { grace: string }): Promise<void> {
  const id = keyIdOf(keyId);
  const graceMs = graceMsOf(flags.grace);
  const { keystore, dbPath } = await placesOf(flags);
  const { value, events } = rotateKey(keystore, id, graceMs);
  await record(dbPath, events);
  if (flags.json) return console.log(JSON.stringify(value, null, 2));
  console.log(`rotated ${value.old.id} to ${value.key.id} (${value.key.name})`);
  console.log(`secret: ${value.secret}`);
  console.log(`the old key works until ${value.old.expires_at}; the secret is shown this once.`);
}

export async function listKeysCommand(flags: CommonFlags): Promise<void> {
  const { keystore, dbPath } = await placesOf(flags);
  const { value, events } = listKeys(keystore);
  await record(dbPath, events);
  if (flags.json) return console.log(JSON.stringify(value, null, 2));
  if (value.length === 0) return console.log(`no gateway keys in ${keystore}`);
  console.log(
    table([['ID', 'NAME', 'STATUS', 'USER', 'TEAM', 'MODELS', 'DAILY', 'MONTHLY'], ...value.map(row)]),
  );
}

function row(key: KeyView): string[] {
  return [
    key.id,
    key.name,
    key.status === 'active' && key.expires_at !== null ? `active until ${key.expires_at}` : key.status,
    key.user_id ?? '-',
    key.team_id ?? '-',
    key.allowed_models?.join(',') ?? 'any',
    key.daily_cap_usd === null ? '-' : `$${key.daily_cap_usd}`,
    key.monthly_cap_usd === null ? '-' : `$${key.monthly_cap_usd}`,
  ];
}
