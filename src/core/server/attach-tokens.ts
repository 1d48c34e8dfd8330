import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

interface Issued {
  readonly sessionId: string;
  readonly expiresAt: number;
  readonly digest: Buffer;
}

function digestOf(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/**
 * Attach tokens (streaming §3.1): single use, expiring `ttlMs` after issue if unused. Tokens are kept
 * by their SHA-256, so the lookup learns nothing from timing about the token itself, and the final
 * comparison is constant-time. Tokens are never logged.
 */
export class AttachTokens {
  private readonly issued = new Map<string, Issued>();

  constructor(private readonly ttlMs = 60_000) {}

  issue(sessionId: string): string {
    this.sweep();
    const token = `atk_${randomBytes(24).toString('base64url')}`;
    const digest = digestOf(token);
    this.issued.set(digest.toString('hex'), { sessionId, expiresAt: Date.now() + this.ttlMs, digest });
    return token;
  }

  /** Consumes a token for a session: true once, false for a missing, used, expired or foreign token. */
  consume(token: string | null, sessionId: string): boolean {
    if (!token) return false;
    const digest = digestOf(token);
    const key = digest.toString('hex');
    const entry = this.issued.get(key);
    if (entry === undefined) return false;
    this.issued.delete(key);
    return (
      timingSafeEqual(entry.digest, digest) && entry.sessionId === sessionId && entry.expiresAt > Date.now()
    );
  }

  private sweep(): void {
    const now = Date.now();
    for (const [key, entry] of this.issued) if (entry.expiresAt <= now) this.issued.delete(key);
  }
}
