import { CLUSTER_TOKEN, type ClusterTestNode, clusterRequest } from './cluster.js';
import { subscribeOn } from './protocol.js';
import { openClient, type TestClient } from './server.js';

/** A small seeded generator (mulberry32): a failing run can be replayed from its seed. */
export function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Whether an event ends the turn. */
export const turnEnd = (turnId: string) => (event: any) =>
  event.turn_id === turnId && (event.type === 'turn.completed' || event.type === 'turn.cancelled');

/**
 * How a turn's end says it ended: `cancelled`, `failed: <why>` (a failed turn is a `turn.completed` with
 * `signals_extra.failure`, e.g. `server_stopped` from crash recovery), or `completed`.
 */
export function turnOutcome(end: { type: string; payload: any }): string {
  if (end.type === 'turn.cancelled') return 'cancelled';
  const failure = end.payload?.signals_extra?.failure;
  return failure === undefined ? 'completed' : `failed: ${failure}`;
}

/**
 * A client of one session that follows it across the nodes of a cluster: when its connection closes
 * (its node died, or ended the stream) it resumes from its cursor on a live node, as a real client
 * behind a load balancer would.
 */
export class FollowingClient {
  readonly events: any[] = [];
  snapshotAt: string | null = null;
  /** The snapshot frame of its first attach, for rendering what it shows (src/client/reducer.ts). */
  snapshot: any = null;
  reconnects = 0;
  /** Event ids that arrived on a connection at or below one it had already delivered. */
  readonly outOfOrder: string[] = [];
  private client: TestClient | null = null;
  private stopped = false;

  constructor(
    private readonly sessionId: string,
    private readonly alive: () => ClusterTestNode[],
  ) {}

  async attach(node: ClusterTestNode, since: string | null): Promise<void> {
    const handshake = await clusterRequest(node.url, 'GET', `/sessions/${this.sessionId}`);
    if (handshake.status !== 200) throw new Error(`handshake on ${node.nodeId}: ${handshake.status}`);
    const client = await openClient(handshake.body.ws_url as string, {
      headers: { authorization: `Bearer ${CLUSTER_TOKEN}` },
    });
    const from = client.frames.length;
    const subscribed = await subscribeOn(client, { filter: 'preset:full', since, snapshot: since === null });
    if (since === null) {
      this.snapshotAt = subscribed.snapshot.snapshot_at_event_id as string;
      this.snapshot = subscribed.snapshot;
    }
    this.client = client;
    // Frames are read as they come; on a close the client resumes from its cursor on a live node.
    let seen = from;
    let newestHere = '';
    const take = () => {
      for (; seen < client.frames.length; seen += 1) {
        const frame = client.frames[seen];
        if (frame.type !== 'event') continue;
        if (frame.event.id <= newestHere) this.outOfOrder.push(frame.event.id);
        else newestHere = frame.event.id;
        this.events.push(frame.event);
      }
    };
    client.ws.on('message', () => setImmediate(take));
    take();
    void client.closed.then(() => {
      take();
      if (this.client === client && !this.stopped) void this.resume();
    });
  }

  private async resume(): Promise<void> {
    this.reconnects += 1;
    for (let attempt = 0; attempt < 100; attempt += 1) {
      const nodes = this.alive();
      const node = nodes[attempt % Math.max(1, nodes.length)];
      try {
        if (node === undefined) throw new Error('no live node');
        await this.attach(node, this.events.at(-1)?.id ?? this.snapshotAt);
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }

  async waitFor(predicate: (event: any) => boolean, what: string, timeoutMs = 30_000): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find(predicate);
      if (found !== undefined) return found;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  close(): void {
    this.stopped = true;
    this.client?.close();
  }
}

/**
 * Jepsen's accounting of what a client received against what the store holds of its session after its
 * snapshot: stored events it never got (lost), got twice (duplicated), or got and the store does not
 * hold (unexpected). Streaming events are not stored and are not counted.
 */
export function accountFor(
  client: FollowingClient,
  stored: readonly { id: string }[],
): { lost: string[]; duplicated: string[]; unexpected: string[] } {
  const expected = stored.filter((event) => event.id > client.snapshotAt!).map((event) => event.id);
  const received = client.events.filter((event) => event.seq !== null).map((event) => event.id as string);
  const receivedSet = new Set(received);
  const storedIds = new Set(stored.map((event) => event.id));
  return {
    lost: expected.filter((id) => !receivedSet.has(id)),
    duplicated: received.filter((id, index) => received.indexOf(id) !== index),
    unexpected: received.filter((id) => !storedIds.has(id)),
  };
}
