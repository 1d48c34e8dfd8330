import type { MetisEvent } from '../events/envelope.js';
import type { EventFilter, EventFilterInput } from '../events/filter.js';

export type EventHandler = (event: MetisEvent) => void | Promise<void>;
export type BatchHandler = (events: readonly MetisEvent[]) => void | Promise<void>;

/** What a subscriber asks the bus for (bus spec §3.1). */
export interface Subscription {
  /** For diagnostics: logs, `bus.subscriber_registered`, `metis plugins`. */
  readonly name: string;
  readonly filter?: EventFilterInput;
  /** Called once per matching event. */
  readonly handler?: EventHandler;
  /**
   * Called once per dispatch tick with every matching event of the tick, in id order. The trace writer
   * uses it to commit a tick's events in one transaction (group commit).
   */
  readonly batchHandler?: BatchHandler;
  /**
   * Fast-path handlers run inside the dispatch worker, synchronously with each tick, and must finish in
   * well under 1 ms per event. Others get their own bounded mailbox and run on their own schedule.
   */
  readonly fastPath?: boolean;
  /**
   * Types this subscriber understands. Events of other types are skipped with a debug log (forward
   * compatibility, bus §9.1 test 9). Defaults to the catalog this build of metis ships; the trace writer
   * passes 'all'.
   */
  readonly knownTypes?: ReadonlySet<string> | 'all';
  /** Bound of the mailbox of a non-fast-path subscriber (default 10,000); overflow drops and counts. */
  readonly mailboxLimit?: number;
}

export interface SubscriptionStats {
  delivered: number;
  failed: number;
  dropped: number;
  skippedUnknown: number;
}

export interface SubscriptionHandle {
  readonly id: string;
  readonly subscription: Subscription;
  readonly filter: EventFilter;
  readonly stats: Readonly<SubscriptionStats>;
}

export type UnsubscribeReason = 'explicit' | 'client_disconnect' | 'shutdown' | 'removed_after_errors';
