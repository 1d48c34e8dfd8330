import { describe, expect, it } from 'vitest';
import { clusterKeys } from '../../src/core/cluster/cluster-keys.js';
import {
  associatedData,
  messageSealer,
  SEAL_OVERHEAD_BYTES,
  sealId,
} from '../../src/core/cluster/message-seal.js';

/**
 * The seal on every broker message (message-seal.ts, issue 34 observation 3): another node with the same
 * token opens it; anything else (another token, another subject or header, a changed byte, a reply
 * moved to another request) does not open, and the text never shows in the bytes.
 */

const TOKEN = 'seal-test-token-0123456789abcdef';
const SUBJECT = 'metis.session.sess_1';
const HEADERS = { 'Metis-Family': 'bus', 'Metis-Node': 'node-a' };
const TEXT = JSON.stringify({ type: 'tool.called', payload: { input: { command: 'rm -rf /tmp/x' } } });

describe('a sealed broker message', () => {
  it('opens for another sender of the same token, and shows nothing of its text', () => {
    const a = messageSealer(clusterKeys(TOKEN).sealing);
    const b = messageSealer(clusterKeys(TOKEN).sealing);
    const sealed = a.seal(associatedData('message', SUBJECT, HEADERS), TEXT);
    expect(sealed.length).toBe(Buffer.byteLength(TEXT) + SEAL_OVERHEAD_BYTES);
    expect(sealed.toString('latin1')).not.toContain('rm -rf');
    // Header names in any case, in any order: NATS may hand them back either way.
    const reordered = { 'metis-node': 'node-a', 'METIS-FAMILY': 'bus' };
    expect(b.open(associatedData('message', SUBJECT, reordered), sealed)).toBe(TEXT);
    // Twice the same text: never the same bytes (a reader learns not even that it repeats).
    expect(a.seal(associatedData('message', SUBJECT, HEADERS), TEXT).equals(sealed)).toBe(false);
  });

  it('does not open under another token, subject, header, kind, or with any byte changed', () => {
    const a = messageSealer(clusterKeys(TOKEN).sealing);
    const bound = associatedData('message', SUBJECT, HEADERS);
    const sealed = a.seal(bound, TEXT);
    const other = messageSealer(clusterKeys('another-token-0123456789abcdef').sealing);
    expect(other.open(bound, sealed)).toBeNull();
    const b = messageSealer(clusterKeys(TOKEN).sealing);
    expect(b.open(associatedData('message', 'metis.session.sess_2', HEADERS), sealed)).toBeNull();
    expect(
      b.open(associatedData('message', SUBJECT, { ...HEADERS, 'Metis-Node': 'node-b' }), sealed),
    ).toBeNull();
    expect(b.open(associatedData('message', SUBJECT), sealed)).toBeNull();
    expect(b.open(associatedData('request', SUBJECT, HEADERS), sealed)).toBeNull();
    for (const index of [0, 1, 20, 40, sealed.length - 1]) {
      const changed = Buffer.from(sealed);
      changed[index]! ^= 1;
      expect(b.open(bound, changed), `byte ${index}`).toBeNull();
    }
    expect(b.open(bound, Buffer.from(TEXT))).toBeNull();
    expect(b.open(bound, sealed.subarray(0, SEAL_OVERHEAD_BYTES - 1))).toBeNull();
    expect(b.open(bound, sealed)).toBe(TEXT);
  });

  it('a reply opens only as the answer to the request it was sealed for', () => {
    const asker = messageSealer(clusterKeys(TOKEN).sealing);
    const owner = messageSealer(clusterKeys(TOKEN).sealing);
    const subject = 'metis.node.node-a.http';
    const first = asker.seal(associatedData('request', subject), '{"n":1}');
    const second = asker.seal(associatedData('request', subject), '{"n":2}');
    const reply = owner.seal(associatedData('reply', subject, undefined, sealId(first)), '{"status":202}');
    expect(asker.open(associatedData('reply', subject, undefined, sealId(first)), reply)).toBe(
      '{"status":202}',
    );
    expect(asker.open(associatedData('reply', subject, undefined, sealId(second)), reply)).toBeNull();
  });

  it('knows its own messages from those of other senders', () => {
    const a = messageSealer(clusterKeys(TOKEN).sealing);
    const b = messageSealer(clusterKeys(TOKEN).sealing);
    const sealed = a.seal(associatedData('message', SUBJECT), TEXT);
    expect(a.sealedHere(sealed)).toBe(true);
    expect(b.sealedHere(sealed)).toBe(false);
    expect(a.sealedHere(Buffer.from('x'))).toBe(false);
  });
});
