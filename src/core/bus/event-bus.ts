import type { Logger } from 'pino';
import { EventBusOverflowError, EventValidationError, FastPathHandlerError } from '../errors.js';
import { CATALOG, type EventType, type PayloadOf } from '../events/catalog/index.js';
import { microsToIso, nowMicros } from '../events/clock.js';
import type { CatalogEntry } from '../events/define.js';
import {
  type Actor,
  isMorePrivate,
  type MetisEvent,
  type Sensitivity,
  SYSTEM_SESSION_ID,
} from '../events/envelope.js';
import { describeFilter, matchesFilter, toEventFilter } from '../events/filter.js';
import { newEventId, newId } from '../events/ids.js';
import { silentLogger } from '../logger.js';
import { Mailbox } from './mailbox.js';
import { isSlow } from './slow.js';
import type {
  Subscription,
  SubscriptionHandle,
  SubscriptionStats,
  UnsubscribeReason,
} from './subscription.js';
import { type ValidationMode, validationModeFromEnv } from './validation-mode.js';

/** What a caller passes to `emit`; the bus stamps id, timestamp, seq and sensitivity. */
/** An event to emit: its type from the catalog, and a payload the compiler checks against that type. */
export interface EmitInput<T extends EventType = EventType> {
  readonly type: T;
  readonly session_id: string;
  readonly turn_id?: string | null;
  readonly parent_event_id?: string | null;
  /** Defaults to the catalog's typical actor for the type. */
  readonly actor?: Actor;
  readonly payload: PayloadOf<T>;
  /** May only make the event more private than the catalog and §4.4.1 would record it. */
  readonly sensitivity?: Sensitivity;
  /**
   * The id, taken from `newEventId()` just before the call (so ids stay monotonic), for an event whose
   * payload names itself: a `bus.gap_detected` that is the first persisted event after its gap.
   */
  readonly presetId?: string;
}

/**
 * An event whose type is known only at run time (a hand-off row stored for later, a test of the bus's
 * own checks): validated against the catalog when emitted, as every event is, but not at compile time.
 */
export interface DynamicEmitInput extends Omit<EmitInput, 'type' | 'payload'> {
  readonly type: string;
  readonly payload: unknown;
}

export interface EventBusOptions {
  readonly logger?: Logger;
  readonly validation?: ValidationMode;
  /** Bound of the dispatch queue (bus spec §3.5). */
  readonly queueLimit?: number;
  /** The catalog to validate against; tests pass a "future" catalog to exercise forward compatibility. */
  readonly catalog?: ReadonlyMap<string, CatalogEntry>;
  /** Highest `seq` already used by a session (from the trace store), asked once per session per process. */
  readonly lastSeq?: (sessionId: string) => number;
}

interface Route {
  readonly handle: InternalHandle;
}

interface InternalHandle extends SubscriptionHandle {
  readonly stats: SubscriptionStats;
  readonly fastPath: boolean;
  readonly known: ReadonlySet<string> | null;
  readonly mailbox: Mailbox | null;
  errorCount: number;
}

const DEFAULT_QUEUE_LIMIT = 10_000;
const DEFAULT_MAILBOX_LIMIT = 10_000;

/**
 * The in-process event bus (bus spec §3). `emit` validates, stamps and enqueues, then returns; a
 * dispatch worker drains everything enqueued in one tick and fans it out:
 *
 *   emit ──▶ queue ──(setImmediate)──▶ drain ──▶ fast-path subscribers (inline, per tick batch)
 *                                          └────▶ mailboxes of the others (each on its own schedule)
 */
export class EventBus {
  readonly validation: ValidationMode;
  private readonly logger: Logger;
  private readonly queueLimit: number;
  private readonly catalog: ReadonlyMap<string, CatalogEntry>;
  private readonly lastSeq: (sessionId: string) => number;
  private readonly seqBySession = new Map<string, number>();
  private readonly handles = new Map<string, InternalHandle>();
  /** Subscribers per event type, built on first use and dropped when subscriptions change. */
  private routesByType = new Map<string, readonly Route[]>();
  private queue: MetisEvent[] = [];
  private drainScheduled = false;
  /** True while a dispatch runs: a drain asked for inside it (a handler that flushes) is deferred. */
  private dispatching = false;
  /** null when nobody listens, so emit pays one comparison. */
  private emitListeners: ((event: MetisEvent) => void)[] | null = null;

  constructor(options: EventBusOptions = {}) {
    this.logger = options.logger ?? silentLogger();
    this.validation = options.validation ?? validationModeFromEnv();
    this.queueLimit = options.queueLimit ?? DEFAULT_QUEUE_LIMIT;
    this.catalog = options.catalog ?? CATALOG;
    this.lastSeq = options.lastSeq ?? (() => 0);
  }

  /**
   * Validates and enqueues an event; never waits. Returns the stamped event (its id is the parent of
   * what it causes), or `null` when lenient mode dropped an invalid one.
   * @throws EventValidationError in strict mode; EventBusOverflowError when the queue is full.
   */
  emit<T extends EventType>(input: EmitInput<T>): MetisEvent | null {
    return this.emitChecked(input);
  }

  /** `emit` for a type known only at run time (DynamicEmitInput): the same checks, made at run time only. */
  emitDynamic(input: DynamicEmitInput): MetisEvent | null {
    return this.emitChecked(input);
  }

  private emitChecked(input: DynamicEmitInput): MetisEvent | null {
    const entry = this.catalog.get(input.type);
    if (entry === undefined) {
      return this.reject(input.type, [], `unknown event type "${input.type}"`);
    }
    const parsed = entry.schema.safeParse(input.payload);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => ({
        path: i.path.map(String).join('.'),
        message: i.message,
      }));
      const detail = issues.map((i) => `${i.path || '(payload)'}: ${i.message}`).join('; ');
      return this.reject(input.type, issues, `invalid payload for "${input.type}": ${detail}`);
    }
    if (this.queue.length >= this.queueLimit) {
      this.logger.error(
        { queue_limit: this.queueLimit, type: input.type },
        'event bus dispatch queue overflow',
      );
      throw new EventBusOverflowError(this.queueLimit);
    }
    const payload = parsed.data as Record<string, unknown>;
    const resolved = entry.resolveSensitivity ? entry.resolveSensitivity(payload) : entry.sensitivity;
    const sensitivity =
      input.sensitivity !== undefined && isMorePrivate(input.sensitivity, resolved)
        ? input.sensitivity
        : resolved;
    const event: MetisEvent = {
      id: input.presetId ?? newEventId(),
      timestamp: microsToIso(nowMicros()),
      session_id: input.session_id,
      turn_id: input.turn_id ?? null,
      parent_event_id: input.parent_event_id ?? null,
      type: input.type,
      actor: input.actor ?? entry.actors[0],
      payload,
      sensitivity,
      seq: this.nextSeq(input.session_id),
    };
    if (this.handles.size === 0) return event;
    this.queue.push(event);
    if (!this.drainScheduled) {
      this.drainScheduled = true;
      setImmediate(this.drain);
    }
    if (this.emitListeners !== null) for (const listener of this.emitListeners) listener(event);
    return event;
  }

  /**
   * Calls `listener` synchronously for every event accepted by `emit`, before dispatch. The streaming
   * server uses it to know which bus events are still on their way to the store (DESIGN.md invariant 1).
   */
  onEmit(listener: (event: MetisEvent) => void): () => void {
    this.emitListeners = [...(this.emitListeners ?? []), listener];
    return () => {
      const rest = (this.emitListeners ?? []).filter((l) => l !== listener);
      this.emitListeners = rest.length === 0 ? null : rest;
    };
  }

  /**
   * Registers a subscriber and announces it with `bus.subscriber_registered`.
   * @throws FastPathHandlerError when a handler marked slow() asks for the fast path.
   */
  subscribe(subscription: Subscription): SubscriptionHandle {
    const fastPath = subscription.fastPath ?? false;
    if (fastPath && (isSlow(subscription.handler) || isSlow(subscription.batchHandler))) {
      throw new FastPathHandlerError(subscription.name);
    }
    if (!subscription.handler && !subscription.batchHandler) {
      throw new TypeError(`subscription "${subscription.name}" needs a handler or a batchHandler`);
    }
    const stats: SubscriptionStats = { delivered: 0, failed: 0, dropped: 0, skippedUnknown: 0 };
    const filter = toEventFilter(subscription.filter);
    const known = subscription.knownTypes === 'all' ? null : (subscription.knownTypes ?? CATALOG_TYPES);
    const handle: InternalHandle = {
      id: newId('sub'),
      subscription,
      filter,
      stats,
      fastPath,
      known,
      errorCount: 0,
      mailbox: null,
    };
    const withMailbox: InternalHandle = fastPath
      ? handle
      : {
          ...handle,
          mailbox: new Mailbox(
            subscription,
            stats,
            subscription.mailboxLimit ?? DEFAULT_MAILBOX_LIMIT,
            (error, events) => this.logHandlerError(withMailbox, error, events),
            this.logger,
          ),
        };
    this.handles.set(withMailbox.id, withMailbox);
    this.routesByType.clear();
    this.emit({
      type: 'bus.subscriber_registered',
      session_id: SYSTEM_SESSION_ID,
      payload: { subscription_name: subscription.name, filter: describeFilter(filter), fast_path: fastPath },
    });
    return withMailbox;
  }

  /**
   * Removes a subscription; unknown or already removed handles are ignored (idempotent). Returns the
   * `bus.subscriber_unregistered` event, or null when nothing was removed: the removed subscriber does
   * not receive it, and the trace writer, removing itself at shutdown, stores it from here.
   */
  unsubscribe(handle: SubscriptionHandle, reason: UnsubscribeReason = 'explicit'): MetisEvent | null {
    if (!this.handles.delete(handle.id)) return null;
    this.routesByType.clear();
    return this.emit({
      type: 'bus.subscriber_unregistered',
      session_id: SYSTEM_SESSION_ID,
      payload: { subscription_name: handle.subscription.name, reason },
    });
  }

  /** Every live subscription, for `metis plugins` and diagnostics. */
  subscriptions(): readonly SubscriptionHandle[] {
    return [...this.handles.values()];
  }

  /**
   * Dispatches what is queued now, synchronously, instead of on the next tick: for a caller about to
   * read the state a fast-path subscriber keeps (the runtime reads the session's cost for
   * `session.ended`) which must include every event emitted so far. Does nothing inside a dispatch,
   * where it would hand a subscriber later events before it has seen the earlier ones.
   */
  dispatchNow(): void {
    this.drain();
  }

  /** Dispatches what is queued now and waits until every mailbox is idle: for shutdown and tests. */
  async flush(): Promise<void> {
    for (let round = 0; round < 100; round += 1) {
      this.drain();
      await Promise.all([...this.handles.values()].map((h) => h.mailbox?.idle()));
      if (this.queue.length === 0) return;
    }
  }

  /**
   * Forgets the seq this bus last gave the session: the next one follows the store's last (a session
   * whose events were written by another process since, src/core/cluster).
   */
  forgetSeq(sessionId: string): void {
    this.seqBySession.delete(sessionId);
  }

  /**
   * Tells the bus the highest `seq` the store holds for a session this process is about to emit into (a
   * family's load), so it numbers after it without asking `lastSeq`, a synchronous read of the store. The
   * higher of that and what this bus gave the session wins: an event emitted and not yet stored is newer.
   */
  seedSeq(sessionId: string, lastSeq: number): void {
    const given = this.seqBySession.get(sessionId);
    if (given === undefined || given < lastSeq) this.seqBySession.set(sessionId, lastSeq);
  }

  /** Number of events waiting for dispatch. */
  get queued(): number {
    return this.queue.length;
  }

  private readonly drain = (): void => {
    if (this.dispatching) {
      // Called inside a dispatch (a handler flushed, or dispatchNow): dispatching now would hand the
      // subscribers the outer dispatch has not reached yet later events before earlier ones.
      if (!this.drainScheduled) {
        this.drainScheduled = true;
        setImmediate(this.drain);
      }
      return;
    }
    this.drainScheduled = false;
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.dispatching = true;
    try {
      this.dispatch(batch);
    } finally {
      this.dispatching = false;
    }
  };

  private dispatch(batch: readonly MetisEvent[]): void {
    // Group events by type once per tick; a tick is usually a handful of types.
    const byHandle = new Map<InternalHandle, MetisEvent[]>();
    for (const event of batch) {
      for (const route of this.routesFor(event.type)) {
        const { handle } = route;
        if (!matchesFilter(handle.filter, event)) continue;
        if (handle.known !== null && !handle.known.has(event.type)) {
          handle.stats.skippedUnknown += 1;
          this.logger.debug(
            { subscription: handle.subscription.name, type: event.type, event_id: event.id },
            'subscriber skipped an event of a type it does not know',
          );
          continue;
        }
        let list = byHandle.get(handle);
        if (list === undefined) {
          list = [];
          byHandle.set(handle, list);
        }
        list.push(event);
      }
    }
    for (const [handle, events] of byHandle) {
      if (handle.mailbox !== null) handle.mailbox.offer(events);
      else this.deliverFastPath(handle, events);
    }
  }

  private deliverFastPath(handle: InternalHandle, events: MetisEvent[]): void {
    const { handler, batchHandler } = handle.subscription;
    if (batchHandler) {
      try {
        const result = batchHandler(events);
        if (result instanceof Promise) result.catch((error) => this.logHandlerError(handle, error, events));
        handle.stats.delivered += events.length;
      } catch (error) {
        handle.stats.failed += events.length;
        this.logHandlerError(handle, error, events);
      }
    }
    if (handler) {
      for (const event of events) {
        try {
          const result = handler(event);
          if (result instanceof Promise)
            result.catch((error) => this.logHandlerError(handle, error, [event]));
          handle.stats.delivered += 1;
        } catch (error) {
          handle.stats.failed += 1;
          this.logHandlerError(handle, error, [event]);
        }
      }
    }
  }

  private routesFor(type: string): readonly Route[] {
    let routes = this.routesByType.get(type);
    if (routes === undefined) {
      routes = [...this.handles.values()]
        .filter((h) => h.filter.event_types === null || h.filter.event_types.has(type))
        .map((handle) => ({ handle }));
      this.routesByType.set(type, routes);
    }
    return routes;
  }

  /** A failing handler is logged at WARN and keeps its subscription; it is never turned into an event. */
  private logHandlerError(handle: InternalHandle, error: unknown, events: readonly MetisEvent[]): void {
    handle.errorCount += 1;
    const count = handle.errorCount;
    // The first ten failures in full, then one line per hundred, so a subscriber that fails on every
    // event cannot flood the logs (bus §9.1 test 14).
    if (count > 10 && count % 100 !== 0) return;
    this.logger.warn(
      {
        subscription: handle.subscription.name,
        event_id: events[0]?.id,
        event_type: events[0]?.type,
        events: events.length,
        error_count: count,
        err: error instanceof Error ? { name: error.name, message: error.message } : String(error),
      },
      'event handler failed',
    );
  }

  private nextSeq(sessionId: string): number {
    let last = this.seqBySession.get(sessionId);
    if (last === undefined) last = this.lastSeq(sessionId);
    const next = last + 1;
    this.seqBySession.set(sessionId, next);
    return next;
  }

  private reject(
    type: string,
    issues: readonly { path: string; message: string }[],
    message: string,
  ): MetisEvent | null {
    if (this.validation === 'strict') throw new EventValidationError(type, issues, message);
    this.logger.error({ type, issues }, `dropped invalid event: ${message}`);
    return null;
  }
}

const CATALOG_TYPES: ReadonlySet<string> = new Set(CATALOG.keys());
