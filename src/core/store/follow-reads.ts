import type { MetisEvent } from '../events/envelope.js';

/** The newest stored event of a session: where a node that follows it from now on starts. */
export interface StoredMark {
  readonly id: string;
  readonly seq: number;
}

/**
 * What a cluster node reads of the store of record to follow the sessions other nodes run without a
 * working copy (cluster/pg-session-follower.ts): the stored events it has not released yet, where a
 * session stands, and which sessions a family holds.
 */
export interface FollowReads {
  /**
   * Of each session given, its stored events with a seq after the one given, at most `limit` of each
   * (the lowest seqs), all of them in id order.
   */
  eventsAfter(afterSeqBySession: ReadonlyMap<string, number>, limit: number): Promise<MetisEvent[]>;
  /** The newest stored event of each session given that has one. */
  newest(sessionIds: readonly string[]): Promise<Map<string, StoredMark>>;
  /** A session and its delegation descendants, the session first. */
  lineage(root: string): Promise<string[]>;
}
