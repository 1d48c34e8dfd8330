import type { MetisEvent } from '../events/envelope.js';

/** Events left out of a shipment because another node runs their session now, and those sessions. */
export interface Fenced {
  readonly events: readonly MetisEvent[];
  readonly sessionIds: readonly string[];
}

/**
 * The store of record behind a working copy (postgres/pg-shipper.ts): what commits locally is shipped
 * there, and a request is answered once it has arrived.
 */
export interface StoreUpstream {
  /** The store, its password hidden. */
  readonly label: string;
  /** Why the store cannot be written now; null while it can. */
  readonly failure: Error | null;
  /** Changes committed locally and not yet in the store. */
  readonly backlog: number;
  /** When the last shipment went through (µs since the epoch), or null before the first. */
  readonly shippedAtUs: number | null;
  /** Resolves true once everything committed locally so far is shipped; false after `timeoutMs`. */
  whenShipped(timeoutMs: number): Promise<boolean>;
  start(): void;
  /** Called after each local commit. */
  kick(): void;
  close(timeoutMs: number): Promise<void>;
  /**
   * Calls `listener` after each shipment with the newest of this copy's own events the store now holds
   * (its events are shipped in id order). Returns the function that stops it.
   */
  onShipped(listener: (eventsThrough: string) => void): () => void;
  /**
   * Calls `listener` with the events a shipment left out because another node runs their session now
   * (a cluster node's fencing); they are gone from the copy, and never reach the store.
   */
  onFenced(listener: (fenced: Fenced) => void): () => void;
}
