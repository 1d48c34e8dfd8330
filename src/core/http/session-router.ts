/**
 * Awaited before a request that changes a session: in a cluster, the node must own the session first
 * (src/core/cluster/session-leases.ts). `creating`: the request makes the session if it is unknown.
 */
export type SessionGate = (sessionId: string, creating?: boolean) => Promise<void>;

/** What a request the gate refused looks like to whoever may run it elsewhere. */
export interface RefusedRequest {
  readonly method: string;
  readonly url: string;
  readonly body: unknown;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

/**
 * Runs a request the gate refused on the node that owns its session (a cluster): the answer to send,
 * or null to send the refusal.
 */
export type ForwardRefused = (
  refusal: unknown,
  request: RefusedRequest,
) => Promise<{ status: number; contentType: string | null; body: string; node: string } | null>;

/**
 * Where a request naming a session runs: the one port the HTTP layer and the streams ask, which a
 * cluster implements (core/app/cluster-seat.ts). On a single node every session runs here.
 */
export interface SessionRouter {
  /**
   * Awaited before a request that changes a session (any method but GET on a path with its id, and the
   * turn streams): resolves when this node owns it, throws the refusal otherwise.
   */
  readonly gate: SessionGate;
  /** Awaited before a read of a session here: a cluster node brings the session up to date. */
  read(sessionId: string): Promise<void>;
  /** Runs a request the gate refused on the node that owns its session; null to send the refusal. */
  readonly forward: ForwardRefused;
  /**
   * A client of this node opened a stream of the session: a cluster node follows it from now until the
   * function returned is called (the stream closed). Absent on a single node.
   */
  readonly watch?: (sessionId: string) => () => void;
  /**
   * A stream's request (a cancel frame) for a session another node runs: run there, resolving with its
   * answer's status and body; null when this node runs it. Absent on a single node.
   */
  readonly runElsewhere?: (
    sessionId: string,
    request: { method: string; url: string; body: unknown },
  ) => Promise<{ status: number; body: string } | null>;
}
