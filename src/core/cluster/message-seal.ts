import {
  createCipheriv,
  createDecipheriv,
  createSecretKey,
  hkdfSync,
  type KeyObject,
  randomBytes,
} from 'node:crypto';

/**
 * AES-256-GCM for the messages nodes send each other on the broker: a reader without the cluster's
 * token learns nothing of them, and a message sealed without it, or changed on the way, does not open.
 *
 * Layout: version (1 byte) | sender salt (16) | IV (12) | ciphertext | tag (16). Each sealer (one
 * process's start) seals under a key of its own, derived from the cluster's sealing key and a salt it
 * draws, with a counter as IV: an IV then never repeats under a key, however many messages one token
 * sees in its life (random IVs under one key are safe only up to some 2^32 messages in all).
 */

const VERSION = 1;
const SALT_BYTES = 16;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const HEAD_BYTES = 1 + SALT_BYTES + IV_BYTES;
/** How many bytes sealing adds to a message. */
export const SEAL_OVERHEAD_BYTES = HEAD_BYTES + TAG_BYTES;
const SENDER_KEY_LABEL = 'metis broker sender key v1';
/** Other senders' keys kept; a cluster's nodes and their restarts are far fewer. */
const MAX_SENDER_KEYS = 1_024;

/** What a sealed message is: published, a request, or the reply to one. */
export type SealedKind = 'message' | 'request' | 'reply';

/**
 * What a seal binds besides the text: the kind, the subject, the headers (names in any case, values as
 * sent) and, for a reply, the request it answers (its sealId). A message moved to another subject,
 * given other headers, or replayed as the answer to another request does not open.
 */
export function associatedData(
  kind: SealedKind,
  subject: string,
  headers?: Readonly<Record<string, string>>,
  inReplyTo?: Uint8Array,
): Buffer {
  let text = `${kind}\n${subject}\n`;
  if (headers !== undefined)
    text += Object.entries(headers)
      .map(([name, value]) => `${name.toLowerCase()}:${value}\n`)
      .sort()
      .join('');
  const bound = Buffer.from(text, 'utf8');
  return inReplyTo === undefined ? bound : Buffer.concat([bound, inReplyTo]);
}

/** The bytes that name one sealed message (its sender and IV): a reply binds the request's. */
export function sealId(sealed: Uint8Array): Uint8Array {
  return sealed.subarray(1, HEAD_BYTES);
}

export interface MessageSealer {
  seal(associated: Buffer, text: string): Buffer;
  /** The text, or null when the bytes were not sealed with this cluster's key for `associated`. */
  open(associated: Buffer, sealed: Uint8Array): string | null;
  /** Whether this sealer sealed the message (a node hearing its own publication). */
  sealedHere(sealed: Uint8Array): boolean;
}

/** A sealer for this process, keyed by the cluster's sealing key (cluster-keys.ts). */
export function messageSealer(sealingKey: Buffer): MessageSealer {
  const salt = randomBytes(SALT_BYTES);
  const senderKey = (senderSalt: Uint8Array): KeyObject =>
    createSecretKey(Buffer.from(hkdfSync('sha256', sealingKey, senderSalt, SENDER_KEY_LABEL, 32)));
  const ownKey = senderKey(salt);
  /** Other senders' keys, by salt; only a salt whose message opened is kept. */
  const senders = new Map<string, KeyObject>();
  let counter = 0;
  const isOwn = (bytes: Buffer) =>
    bytes.length >= HEAD_BYTES && salt.equals(bytes.subarray(1, 1 + SALT_BYTES));
  return {
    seal(associated, text) {
      counter += 1;
      const head = Buffer.allocUnsafe(HEAD_BYTES);
      head[0] = VERSION;
      salt.copy(head, 1);
      head.writeUInt32BE(0, 1 + SALT_BYTES);
      head.writeUInt32BE(Math.floor(counter / 2 ** 32), 1 + SALT_BYTES + 4);
      head.writeUInt32BE(counter >>> 0, 1 + SALT_BYTES + 8);
      const cipher = createCipheriv('aes-256-gcm', ownKey, head.subarray(1 + SALT_BYTES), {
        authTagLength: TAG_BYTES,
      });
      cipher.setAAD(associated);
      const body = cipher.update(text, 'utf8');
      cipher.final();
      return Buffer.concat([head, body, cipher.getAuthTag()]);
    },
    open(associated, sealed) {
      if (sealed.length < SEAL_OVERHEAD_BYTES || sealed[0] !== VERSION) return null;
      const bytes = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
      const saltText = bytes.toString('latin1', 1, 1 + SALT_BYTES);
      let key = isOwn(bytes) ? ownKey : senders.get(saltText);
      const fresh = key === undefined;
      key ??= senderKey(bytes.subarray(1, 1 + SALT_BYTES));
      let text: string;
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(1 + SALT_BYTES, HEAD_BYTES), {
          authTagLength: TAG_BYTES,
        });
        decipher.setAAD(associated);
        decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
        const head = decipher.update(bytes.subarray(HEAD_BYTES, bytes.length - TAG_BYTES));
        const tail = decipher.final();
        text = (tail.length === 0 ? head : Buffer.concat([head, tail])).toString('utf8');
      } catch {
        return null;
      }
      if (fresh) {
        // Only senders that proved the key get here, so a flood of forged salts evicts nothing.
        if (senders.size >= MAX_SENDER_KEYS) senders.clear();
        senders.set(saltText, key);
      }
      return text;
    },
    sealedHere: (sealed) => isOwn(Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength)),
  };
}
