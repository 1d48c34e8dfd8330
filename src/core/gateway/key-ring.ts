import { statSync } from 'node:fs';
import type { Logger } from 'pino';
import { hashSecret, inactiveReason, readKeystore, type StoredKey } from './keystore.js';

/** What a presented secret is: a key that lets the request in, or why it does not. */
export type KeyCheck =
  | { readonly ok: true; readonly key: StoredKey }
  | {
      readonly ok: false;
      readonly reason: 'missing_token' | 'invalid_token' | 'key_revoked';
      /** The first 8 hex characters of the secret's SHA-256, for `gateway.auth_failed`. */
      readonly hashPrefix: string | null;
      /** Set when the secret is a known key's that no longer works. */
      readonly keyId: string | null;
    };

/**
 * The running server's view of the keystore. `metis gateway issue-key|revoke-key|rotate-key` write the
 * file from another process; the file is looked at (one `stat`) on each request and read again when it
 * changed, so a key issued or revoked is in effect at the next request, with no restart. Keys are found
 * by the SHA-256 of the presented secret, which is all the file holds.
 */
export class KeyRing {
  private byHash = new Map<string, StoredKey>();
  private byId = new Map<string, StoredKey>();
  private seen = '';

  constructor(
    private readonly path: string,
    private readonly logger: Logger,
  ) {
    this.refresh();
  }

  check(secret: string | null, nowMs = Date.now()): KeyCheck {
    if (secret === null || secret === '')
      return { ok: false, reason: 'missing_token', hashPrefix: null, keyId: null };
    this.refresh();
    const hash = hashSecret(secret);
    const key = this.byHash.get(hash);
    const hashPrefix = hash.slice(0, 8);
    if (key === undefined) return { ok: false, reason: 'invalid_token', hashPrefix, keyId: null };
    if (inactiveReason(key, nowMs) !== null)
      return { ok: false, reason: 'key_revoked', hashPrefix, keyId: key.id };
    return { ok: true, key };
  }

  /** Every key the file holds now (active or not). */
  keys(): StoredKey[] {
    this.refresh();
    return [...this.byId.values()];
  }

  private refresh(): void {
    let stamp: string;
    try {
      const stat = statSync(this.path);
      stamp = `${stat.ino}:${stat.size}:${stat.mtimeMs}`;
    } catch {
      stamp = 'absent';
    }
    if (stamp === this.seen) return;
    try {
      const store = readKeystore(this.path);
      this.byHash = new Map(store.keys.map((key) => [key.secret_sha256, key]));
      this.byId = new Map(store.keys.map((key) => [key.id, key]));
      this.seen = stamp;
    } catch (error) {
      // A file written by hand and broken: the keys read last stay in effect, and the log says why.
      this.logger.error(
        { err: error, path: this.path },
        'the gateway keystore cannot be read; keeping the keys read before',
      );
      this.seen = stamp;
    }
  }
}
