import { hkdfSync } from 'node:crypto';

/**
 * The keys a cluster's nodes derive from the server token they all share (docs/scale-out.md), one per
 * use and never the token itself: the token does not travel, and a proof made for one use is no proof
 * for another.
 */
export interface ClusterKeys {
  /** Seals every message on the broker (message-seal.ts). */
  readonly sealing: Buffer;
  /** Signs each request a node forwards to another (forwarded-proof.ts). */
  readonly forwarding: Buffer;
}

/** Changing it makes every key new: nodes of two versions would then not understand each other. */
const DERIVATION_SALT = 'metis cluster keys v1';

/** HKDF-SHA256 of the token, under a label per use. */
export function clusterKeys(token: string): ClusterKeys {
  const derive = (label: string) => Buffer.from(hkdfSync('sha256', token, DERIVATION_SALT, label, 32));
  return { sealing: derive('broker messages'), forwarding: derive('forwarded requests') };
}
