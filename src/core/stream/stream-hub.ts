import { type MetisEvent, SYSTEM_SESSION_ID } from '../events/envelope.js';
import { MAX_DELEGATION_DEPTH } from '../store/session-lineage.js';
import type { SessionRows } from '../store/store-port.js';
import { SyncReadRefused } from '../store/write-only-session-rows.js';
import { EventFrames } from './event-frames.js';
import type { EventSequencer } from './event-sequencer.js';
import { RecentStreams } from './recent-streams.js';
import type { StreamArchive } from './stream-archive.js';

/**
 * The events that put a question to the user, or close it: a worker's reach its planner's clients even
 * in the default view (an exception to streaming §7.1, docs/decisions.md "Delegated confirmations").
 */
export function isQuestionToUser(event: { readonly type: string }): boolean {
  return event.type === 'tool.confirmation_requested' || event.type === 'tool.confirmation_resolved';
}

/** What the hub delivers to: a client connection. */
export interface StreamTarget {
  /** The session the client attached to. */
  readonly sessionId: string;
  /** Whether events of the session's workers should reach it (undecided until subscribe: yes). */
  wantsWorkers(): boolean;
  /** `frames` builds the event's frame once per transport for all targets; never modified. */
  deliver(event: MetisEvent, frames: EventFrames): void;
  /** Ends the stream with an `error` frame naming why (client-connection.ts `closeFor`). */
  closeFor?(code: string, message: string): void;
}

/**
 * Routes released events to the connections attached to their session, and to the connections of
 * the planner for a worker's events. Each event is serialized and framed at most once, however many
 * clients get it.
 */
export class StreamHub {
  readonly recent: RecentStreams;
  private readonly targets = new Map<string, Set<StreamTarget>>();
  private readonly parentOf = new Map<string, string | null>();
  private readonly detach: () => void;
  /** Sessions whose clients get no heartbeat for now (holdHeartbeats), with how many holds each. */
  private readonly heartbeatHolds = new Map<string, number>();

  constructor(
    readonly sequencer: EventSequencer,
    private readonly sessions: SessionRows,
    archive: StreamArchive | null = null,
  ) {
    this.recent = new RecentStreams(archive);
    this.detach = sequencer.onRelease((event) => this.route(event));
  }

  attach(target: StreamTarget): void {
    let set = this.targets.get(target.sessionId);
    if (set === undefined) {
      set = new Set();
      this.targets.set(target.sessionId, set);
    }
    set.add(target);
  }

  detachTarget(target: StreamTarget): void {
    const set = this.targets.get(target.sessionId);
    if (!set) return;
    set.delete(target);
    if (set.size === 0) this.targets.delete(target.sessionId);
  }

  /** Ends the streams of the sessions `which` names, each with an `error` frame (`code`, `message`). */
  closeStreams(which: (sessionId: string) => boolean, code: string, message: string): number {
    let closed = 0;
    for (const [sessionId, set] of [...this.targets])
      if (which(sessionId))
        for (const target of [...set]) {
          if (target.closeFor === undefined) continue;
          target.closeFor(code, message);
          closed += 1;
        }
    return closed;
  }

  /** The sessions clients are attached to now. */
  attachedSessionIds(): string[] {
    return [...this.targets.keys()];
  }

  connectionCount(): number {
    let count = 0;
    for (const set of this.targets.values()) count += set.size;
    return count;
  }

  close(): void {
    this.detach();
    this.recent.close();
  }

  /**
   * Suspends the heartbeat of the session's clients until the function returned is called: only the
   * `--conformance` flood uses it. A client that stops reading during a flood must be closed as too slow
   * (1008) once its queue overflows; when a loaded machine commits the flood slowly, idle ticks between
   * chunks would otherwise close it for unanswered pings (4408) first.
   */
  holdHeartbeats(sessionId: string): () => void {
    this.heartbeatHolds.set(sessionId, (this.heartbeatHolds.get(sessionId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.heartbeatHolds.get(sessionId) ?? 1) - 1;
      if (left > 0) this.heartbeatHolds.set(sessionId, left);
      else this.heartbeatHolds.delete(sessionId);
    };
  }

  /** Whether the session's clients' heartbeat is suspended (holdHeartbeats). */
  heartbeatsHeld(sessionId: string): boolean {
    return this.heartbeatHolds.has(sessionId);
  }

  /** Delivers an event that did not come through the sequencer: only the `--conformance` hooks use it. */
  injectForConformance(event: MetisEvent): void {
    this.route(event);
  }

  private route(event: MetisEvent): void {
    if (event.seq === null) this.recent.add(event);
    if (event.type === 'delegate.started') {
      this.parentOf.set(String(event.payload.worker_session_id), event.session_id);
    }
    const serialize = new EventFrames(event);
    const direct = this.targets.get(event.session_id);
    if (direct) for (const target of direct) target.deliver(event, serialize);
    const parent = this.parentSession(event.session_id);
    if (parent === null) return;
    if (isQuestionToUser(event)) {
      // A worker's confirmation reaches every session above it, whatever their clients' view: a
      // question to the user is never hidden (docs/decisions.md "Delegated confirmations").
      let ancestor: string | null = parent;
      for (let depth = 0; ancestor !== null && depth < MAX_DELEGATION_DEPTH; depth += 1) {
        const planners = this.targets.get(ancestor);
        if (planners) for (const target of planners) target.deliver(event, serialize);
        ancestor = this.parentSession(ancestor);
      }
      return;
    }
    const planners = this.targets.get(parent);
    if (planners) for (const target of planners) if (target.wantsWorkers()) target.deliver(event, serialize);
  }

  private parentSession(sessionId: string): string | null {
    if (sessionId === SYSTEM_SESSION_ID) return null;
    let parent = this.parentOf.get(sessionId);
    if (parent === undefined) {
      try {
        parent = this.sessions.getSession(sessionId)?.parent_session_id ?? null;
      } catch (error) {
        // A store read only asynchronously answers the sessions the runtime holds; the events here are
        // of those (a worker's parent is learnt from its delegate.started anyway). Not remembered: the
        // session may be loaded later.
        if (error instanceof SyncReadRefused) return null;
        throw error;
      }
      this.parentOf.set(sessionId, parent);
    }
    return parent;
  }
}
