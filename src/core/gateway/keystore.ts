import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { MetisError } from '../errors.js';
import { metisHome } from '../store/paths.js';

/**
 * The gateway's keystore: the durable record of every gateway key (bus spec §6.13). A JSON file, mode
 * 0600, written whole to a temporary file and renamed over the old one, so a reader (a running
 * `metis serve`) sees the old file or the new one, never half of one. Only the SHA-256 of each secret is
 * kept: the plaintext is printed once by `issue-key`/`rotate-key` and is nowhere else.
 */

/** What a secret starts with: a reader of a log or a config file can tell what it is. */
export const SECRET_PREFIX = 'mgw_';

const Decimal = z.string().regex(/^\d+(\.\d+)?$/);

export const StoredKeySchema = z.strictObject({
  id: z.string().regex(/^gk_[0-9A-Z]{26}$/),
  name: z.string(),
  /** SHA-256 of the whole secret, hex. */
  secret_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  /** The first characters of the secret, to recognise it in a list; not enough to use it. */
  secret_hint: z.string(),
  workspace_path: z.string().min(1),
  issued_at: z.string(),
  user_id: z.string().nullable(),
  team_id: z.string().nullable(),
  /** Canonical model ids, or `provider:*`; null: any model. */
  allowed_models: z.array(z.string()).nullable(),
  daily_cap_usd: Decimal.nullable(),
  monthly_cap_usd: Decimal.nullable(),
  revoked_at: z.string().nullable(),
  revoke_reason: z.enum(['admin_revoke', 'grace_period_expired', 'rotated']).nullable(),
  /** Set by a rotation: the key stops working then (its grace period's end). */
  expires_at: z.string().nullable(),
  rotated_to: z.string().nullable(),
  rotated_from: z.string().nullable(),
});

export type StoredKey = z.output<typeof StoredKeySchema>;

const KeystoreSchema = z.strictObject({
  version: z.literal(1),
  keys: z.array(StoredKeySchema),
});

export type Keystore = z.output<typeof KeystoreSchema>;

/** Where the keystore lives: `gateway.keystore` of the config, else `$METIS_HOME/gateway-keys.json`. */
export function keystorePath(configured: string | null, env: NodeJS.ProcessEnv = process.env): string {
  return configured ?? join(metisHome(env), 'gateway-keys.json');
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** A new secret: 32 random bytes, base64url, behind the prefix. */
export function newSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(32).toString('base64url')}`;
}

/** Reads the keystore; a missing file is an empty store. */
export function readKeystore(path: string): Keystore {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, keys: [] };
    throw error;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new MetisError('METIS_ERR_CONFIG_INVALID', `${path} is not valid JSON (the gateway keystore)`);
  }
  const parsed = KeystoreSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new MetisError(
      'METIS_ERR_CONFIG_INVALID',
      `${path}: ${issue.path.join('.') || '(file)'}: ${issue.message} (the gateway keystore)`,
    );
  }
  return parsed.data;
}

/**
 * Writes the keystore whole: a temporary file beside it (mode 0600 from its creation), then a rename,
 * atomic on one file system. The folder is made 0700 when it does not exist.
 */
export function writeKeystore(path: string, store: Keystore): void {
  const dir = dirname(path);
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(store, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  chmodSync(temporary, 0o600);
  renameSync(temporary, path);
}

/** Why a key does not let a request in now, or null when it does. */
export function inactiveReason(key: StoredKey, nowMs: number): 'revoked' | 'expired' | null {
  if (key.revoked_at !== null) return 'revoked';
  if (key.expires_at !== null && Date.parse(key.expires_at) <= nowMs) return 'expired';
  return null;
}

/** Whether a key may use `model` (a canonical id): its list names it, or its provider with `:*`. */
export function mayUseModel(key: StoredKey, model: string): boolean {
  if (key.allowed_models === null) return true;
  const provider = model.slice(0, model.indexOf(':'));
  return key.allowed_models.some((allowed) => allowed === model || allowed === `${provider}:*`);
}
