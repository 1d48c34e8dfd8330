import { closeSync, mkdirSync, openSync, statSync, unlinkSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { MetisError } from '../errors.js';
import type { PayloadOf } from '../events/catalog/index.js';
import { newId } from '../events/ids.js';
import {
  hashSecret,
  inactiveReason,
  type Keystore,
  newSecret,
  readKeystore,
  type StoredKey,
  writeKeystore,
} from './keystore.js';

/**
 * The keystore's mutations, as `metis gateway issue-key|revoke-key|rotate-key` make them. Each reads the
 * file, changes it and writes it whole under a lock file (two admins at once must not lose a key), and
 * returns the audit events the change owes (bus spec §6.13), for the caller to record best effort:
 * the keystore is the durable record, the events the operator's trail.
 */

export type AdminEvent =
  | { readonly type: 'gateway.key_issued'; readonly payload: PayloadOf<'gateway.key_issued'> }
  | { readonly type: 'gateway.key_revoked'; readonly payload: PayloadOf<'gateway.key_revoked'> }
  | { readonly type: 'gateway.key_rotated'; readonly payload: PayloadOf<'gateway.key_rotated'> };

export interface IssueOptions {
  readonly name: string;
  readonly workspacePath: string;
  readonly models: readonly string[] | null;
  readonly dailyUsd: string | null;
  readonly monthlyUsd: string | null;
  readonly userId: string | null;
  readonly teamId: string | null;
}

export interface AdminResult<T> {
  readonly value: T;
  readonly events: AdminEvent[];
}

/** A key as shown to an operator: everything but the secret's hash. */
export type KeyView = Omit<StoredKey, 'secret_sha256'> & {
  readonly status: 'active' | 'revoked' | 'expired';
};

export function viewOf(key: StoredKey, nowMs = Date.now()): KeyView {
  const { secret_sha256: _hash, ...rest } = key;
  const reason = inactiveReason(key, nowMs);
  return { ...rest, status: reason === null ? 'active' : reason };
}

export function issueKey(path: string, options: IssueOptions): AdminResult<{ key: KeyView; secret: string }> {
  return mutate(path, (store, now, events) => {
    const secret = newSecret();
    const key = newKey(options, secret, now);
    store.keys.push(key);
    events.push(issuedEvent(key));
    return { key: viewOf(key), secret };
  });
}

export function revokeKey(path: string, id: string): AdminResult<KeyView> {
  return mutate(path, (store, now, events) => {
    const key = find(store, id);
    if (key.revoked_at !== null)
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `key: ${id} was revoked already (${key.revoked_at})`,
        {
          hint: 'List the keys with `metis gateway list-keys`.',
        },
      );
    key.revoked_at = now.toISOString();
    key.revoke_reason = 'admin_revoke';
    events.push(revokedEvent(key));
    return viewOf(key);
  });
}

/**
 * A new key with the old one's name, identity, models and caps; the old one keeps working for
 * `graceMs` (0: it stops at once), then answers as revoked.
 */
export function rotateKey(
  path: string,
  id: string,
  graceMs: number,
): AdminResult<{ old: KeyView; key: KeyView; secret: string }> {
  return mutate(path, (store, now, events) => {
    const old = find(store, id);
    const inactive = inactiveReason(old, now.getTime());
    if (inactive !== null)
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `key: ${id} is ${inactive}; only an active key rotates`,
        {
          hint: 'Issue a new key with `metis gateway issue-key`.',
        },
      );
    const secret = newSecret();
    const key = newKey(
      {
        name: old.name,
        workspacePath: old.workspace_path,
        models: old.allowed_models,
        dailyUsd: old.daily_cap_usd,
        monthlyUsd: old.monthly_cap_usd,
        userId: old.user_id,
        teamId: old.team_id,
      },
      secret,
      now,
    );
    key.rotated_from = old.id;
    old.rotated_to = key.id;
    old.expires_at = new Date(now.getTime() + graceMs).toISOString();
    store.keys.push(key);
    events.push({
      type: 'gateway.key_rotated',
      payload: {
        old_gateway_key_id: old.id,
        new_gateway_key_id: key.id,
        grace_period_until: old.expires_at,
        workspace_path: old.workspace_path,
        user_id: old.user_id,
        team_id: old.team_id,
      },
    });
    return { old: viewOf(old), key: viewOf(key), secret };
  });
}

/** Every key, oldest first; a rotation's lapsed grace is recorded on the way (see sweepLapsed). */
export function listKeys(path: string): AdminResult<KeyView[]> {
  const store = readKeystore(path);
  const now = Date.now();
  if (!store.keys.some((key) => lapsed(key, now)))
    return { value: store.keys.map((k) => viewOf(k, now)), events: [] };
  return mutate(path, (fresh, _now, _events) => fresh.keys.map((k) => viewOf(k)));
}

/**
 * Marks revoked the keys whose rotation grace has ended (reason `grace_period_expired`, bus §6.13:
 * "when the next admin sweep persists a grace-period lapse"). Every admin command sweeps.
 */
function sweepLapsed(store: Keystore, now: Date, events: AdminEvent[]): void {
  for (const key of store.keys) {
    if (!lapsed(key, now.getTime())) continue;
    key.revoked_at = key.expires_at;
    key.revoke_reason = 'grace_period_expired';
    events.push(revokedEvent(key));
  }
}

function lapsed(key: StoredKey, nowMs: number): boolean {
  return key.revoked_at === null && key.expires_at !== null && Date.parse(key.expires_at) <= nowMs;
}

function mutate<T>(
  path: string,
  change: (store: Keystore, now: Date, events: AdminEvent[]) => T,
): AdminResult<T> {
  const release = lockKeystore(path);
  try {
    const store = readKeystore(path);
    const now = new Date();
    const events: AdminEvent[] = [];
    sweepLapsed(store, now, events);
    const value = change(store, now, events);
    writeKeystore(path, store);
    return { value, events };
  } finally {
    release();
  }
}

function find(store: Keystore, id: string): StoredKey {
  const key = store.keys.find((k) => k.id === id);
  if (key === undefined)
    throw new MetisError('METIS_ERR_INVALID_ARGUMENT', `key: no gateway key ${id}`, {
      hint: 'List the keys with `metis gateway list-keys`.',
    });
  return key;
}

function newKey(options: IssueOptions, secret: string, now: Date): StoredKey {
  return {
    id: newId('gk'),
    name: options.name,
    secret_sha256: hashSecret(secret),
    secret_hint: `${secret.slice(0, 10)}…`,
    workspace_path: resolve(options.workspacePath),
    issued_at: now.toISOString(),
    user_id: options.userId,
    team_id: options.teamId,
    allowed_models: options.models === null ? null : [...options.models],
    daily_cap_usd: options.dailyUsd,
    monthly_cap_usd: options.monthlyUsd,
    revoked_at: null,
    revoke_reason: null,
    expires_at: null,
    rotated_to: null,
    rotated_from: null,
  };
}

function issuedEvent(key: StoredKey): AdminEvent {
  return {
    type: 'gateway.key_issued',
    payload: {
      gateway_key_id: key.id,
      name: key.name,
      workspace_path: key.workspace_path,
      issued_at: key.issued_at,
      user_id: key.user_id,
      team_id: key.team_id,
      allowed_models: key.allowed_models,
      daily_cap_usd: key.daily_cap_usd,
      monthly_cap_usd: key.monthly_cap_usd,
    },
  };
}

function revokedEvent(key: StoredKey): AdminEvent {
  return {
    type: 'gateway.key_revoked',
    payload: {
      gateway_key_id: key.id,
      revoked_at: key.revoked_at!,
      reason: key.revoke_reason!,
    },
  };
}

const LOCK_STALE_MS = 10_000;
const LOCK_WAIT_MS = 5_000;

/** A lock file beside the keystore (O_EXCL); one left by a crashed admin is taken over when stale. */
function lockKeystore(path: string): () => void {
  const lock = `${path}.lock`;
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const until = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      closeSync(openSync(lock, 'wx', 0o600));
      return () => {
        try {
          unlinkSync(lock);
        } catch {
          // gone already: nothing to release
        }
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const age = ageOf(lock);
      if (age !== null && age > LOCK_STALE_MS) {
        try {
          unlinkSync(lock);
        } catch {
          // another admin took it over first
        }
        continue;
      }
      if (Date.now() > until)
        throw new MetisError('METIS_ERR_DB_LOCKED', `${lock} is held by another gateway admin command`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
    }
  }
}

function ageOf(path: string): number | null {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return null;
  }
}
