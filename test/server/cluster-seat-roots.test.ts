import { describe, expect, it } from 'vitest';
import { ClusterSeat } from '../../src/core/app/cluster-seat.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { sqliteSessionReads } from '../../src/core/store/session-reads.js';
import { WriteOnlySessionRows } from '../../src/core/store/write-only-session-rows.js';
import { startRuntime } from '../helpers/runtime.js';

/**
 * A node on PostgreSQL alone has session rows that refuse synchronous reads: the seat finds a
 * session's family root by reading the store (resolveRoot, on every way in for a request) or by
 * learning it as a planner delegates (learnRoots), never by a read the rows would refuse.
 */

/** Rows that write nowhere and refuse every read, as a PostgreSQL server's runtime has them. */
const refusingRows = () => new WriteOnlySessionRows({ write: () => {}, nextRowId: () => 0 });

async function delegated(seat?: ClusterSeat) {
  const h = startRuntime();
  const stopLearning = seat?.learnRoots(h.context.bus);
  const planner = h.runtime.createSession({ workspacePath: h.workspace });
  await h.settle(h.runtime.submitTurn(planner.id, 'delegate: count the files').done);
  stopLearning?.();
  const started = h.context.store
    .sessionEvents(planner.id)
    .find((event: MetisEvent) => event.type === 'delegate.started');
  return { h, planner: planner.id, worker: String(started!.payload.worker_session_id) };
}

describe("a cluster seat finds a session's family root without synchronous reads", () => {
  it('reads the parent chain from the store once, and answers from memory after', async () => {
    const { h, planner, worker } = await delegated();
    const seat = new ClusterSeat(true, refusingRows(), sqliteSessionReads(h.context.port.sessions));
    // Not resolved yet: answered as its own root, and not remembered as such.
    expect(seat.rootOf(worker)).toBe(worker);
    expect(await seat.resolveRoot(worker)).toBe(planner);
    expect(seat.rootOf(worker)).toBe(planner);
    expect(await seat.resolveRoot(planner)).toBe(planner);
    // A session the store does not hold (yet) keeps no answer: its row may still name a parent.
    expect(await seat.resolveRoot('sess_not_yet')).toBe('sess_not_yet');
  });

  it("learns a worker's root as its planner delegates, with no read at all", async () => {
    const seat = new ClusterSeat(true, refusingRows());
    const { planner, worker } = await delegated(seat);
    expect(seat.rootOf(worker)).toBe(planner);
    expect(await seat.resolveRoot(worker)).toBe(planner);
  });
});
