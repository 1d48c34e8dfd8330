import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type ClientItem, MetisClient } from '../../src/client/client.js';
import { initialState, reduce } from '../../src/client/reducer.js';
import { renderItem } from '../../src/client/render-text.js';
import { eventually, subscribe, subscribeOn, waitForType } from '../helpers/protocol.js';
import { startTestServer } from '../helpers/server.js';

/** The worker's `run:` calls shell (execute), which this config asks about; `delegate` itself never asks. */
const ASK_EXECUTE = { tool_confirmation: { write: 'allow', execute: 'ask', network: 'allow' } } as const;

describe("delegated confirmations: a worker's question reaches the planner's clients (issue 13, obs. 5)", () => {
  it('seen on the default view, in the snapshot and the replay after reconnect, listed and answered through the planner', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const planner = await t.createSession();
    // The default view: preset:chat, workers' events left out.
    const watcher = await subscribe(t, planner, { filter: 'preset:chat', snapshot: false });
    await t.submit(planner, 'delegate: run: echo from-worker > worker-marker.txt');

    const requested = await watcher.client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'tool.confirmation_requested',
      15_000,
    );
    const started = watcher.client.events().find((e) => e.type === 'delegate.started')!;
    const worker: string = started.payload.worker_session_id;
    expect(requested.event.session_id).toBe(worker);
    const requestId: string = requested.event.payload.confirmation_request_id;
    // Only the question crosses over: the worker's other events stay out of the default view.
    expect(
      watcher.client
        .events()
        .filter((e) => e.session_id === worker)
        .map((e) => e.type),
    ).toEqual(['tool.confirmation_requested']);
    // The human view tells the user to answer through the session they are attached to.
    const state = reduce(initialState, requested);
    expect(state.confirmations[requestId]).toMatchObject({ session_id: worker, status: 'pending' });
    const line = renderItem({ kind: 'frame', frame: requested }, state, planner, { color: false });
    expect(line).toContain('waiting for approval: confirm shell: echo from-worker > worker-marker.txt');
    expect(line).toContain(`metis confirm ${planner} ${requestId} allow|deny`);

    // Reconnect with a snapshot: the worker's pending request follows it as its event, from the worker.
    await t.context.flush();
    const again = await subscribe(t, planner, { filter: 'preset:chat', snapshot: true });
    expect(again.snapshot.snapshot_at_event_id < requested.event.id).toBe(true);
    await again.client.waitFor((f) => f.type === 'event' && f.event.id === requested.event.id);
    expect(again.client.events().filter((e) => e.session_id === worker)).toEqual([requested.event]);
    // Reconnect with a cursor from before the request: the replay brings it (what `metis tail` does).
    const cursor = watcher.client.events().find((e) => e.type === 'turn.started')!.id;
    const replayed = await subscribe(t, planner, { filter: 'preset:chat', since: cursor, snapshot: false });
    await replayed.client.waitFor((f) => f.type === 'event' && f.event.id === requested.event.id);

    // The planner's listing has it, input whole.
    const listing = await t.request('GET', `/sessions/${planner}/confirmations`);
    expect(listing.status).toBe(200);
    expect(listing.body.confirmations).toMatchObject([
      {
        session_id: worker,
        confirmation_request_id: requestId,
        input: { command: 'echo from-worker > worker-marker.txt' },
      },
    ]);

    // A session that is not an ancestor cannot answer it.
    const stranger = await t.createSession();
    const refused = await t.request('POST', `/sessions/${stranger}/confirmations/${requestId}`, {
      decision: 'allow',
    });
    expect(refused.status).toBe(404);
    expect(refused.body.error.code).toBe('METIS_ERR_CONFIRMATION_NOT_FOUND');
    expect(t.runtime.confirmations.pendingIn(worker)).toEqual([requestId]);

    // Answered through the planner: the worker's tool runs and the planner's turn completes.
    const answered = await t.request('POST', `/sessions/${planner}/confirmations/${requestId}`, {
      decision: 'allow',
      input_hash: listing.body.confirmations[0].input_hash,
    });
    expect(answered.status).toBe(200);
    await watcher.client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'turn.completed' && f.event.session_id === planner,
      15_000,
    );
    expect(existsSync(join(t.workspace, 'worker-marker.txt'))).toBe(true);
    const resolved = watcher.client.events().find((e) => e.type === 'tool.confirmation_resolved')!;
    expect(resolved).toMatchObject({ session_id: worker, payload: { decision: 'allow' } });
    expect(watcher.client.events().find((e) => e.type === 'delegate.completed')).toBeDefined();
    expect(await eventually(() => t.runtime.confirmations.pendingIn(worker).length === 0)).toBe(true);
  }, 60_000);

  it('a client that asked for workers gets the question once, not twice', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const planner = await t.createSession();
    const watcher = await subscribe(t, planner, {
      filter: { event_types: null, actors: null, include_worker_sessions: true },
      snapshot: false,
    });
    await t.submit(planner, 'delegate: run: echo once');
    await waitForType(watcher.client, 'tool.confirmation_requested');
    const [pending] = (await t.request('GET', `/sessions/${planner}/confirmations`)).body.confirmations;
    await t.request('POST', `/sessions/${planner}/confirmations/${pending.confirmation_request_id}`, {
      decision: 'deny',
    });
    await watcher.client.waitFor(
      (f) => f.type === 'event' && f.event.type === 'turn.completed' && f.event.session_id === planner,
      15_000,
    );
    const types = watcher.client.events().map((e) => e.type);
    expect(types.filter((type) => type === 'tool.confirmation_requested')).toHaveLength(1);
    expect(types.filter((type) => type === 'tool.confirmation_resolved')).toHaveLength(1);
  }, 60_000);

  it('MetisClient on preset:full without workers: gets the worker question and its answer once, answers it through the planner, reports no seq gap', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const planner = await t.createSession();
    const client = new MetisClient({ url: t.url, sessionId: planner, filter: 'preset:full', snapshot: true });
    const items: ClientItem[] = [];
    const done = (async () => {
      for await (const item of client) items.push(item);
    })();
    try {
      expect(
        await eventually(() => items.some((i) => i.kind === 'frame' && i.frame.type === 'snapshot')),
      ).toBe(true);
      await t.submit(planner, 'delegate: run: echo alone');
      const eventOf = (i: ClientItem) =>
        i.kind === 'frame' && i.frame.type === 'event' ? i.frame.event : null;
      expect(
        await eventually(() => items.some((i) => eventOf(i)?.type === 'tool.confirmation_requested')),
      ).toBe(true);
      const [pending] = (await t.request('GET', `/sessions/${planner}/confirmations`)).body.confirmations;
      // Answered through the planner's session, as the client library does it.
      await client.confirm(pending.confirmation_request_id, 'allow');
      expect(
        await eventually(
          () =>
            items.some((i) => eventOf(i)?.type === 'turn.completed' && eventOf(i)?.session_id === planner),
          15_000,
        ),
      ).toBe(true);
      expect(items.filter((i) => eventOf(i)?.type === 'tool.confirmation_resolved')).toHaveLength(1);
      expect(items.filter((i) => i.kind === 'gap')).toEqual([]);
    } finally {
      client.close();
      await done;
    }
  }, 60_000);

  it('a question asked between accept and subscribe goes out at the seam of a default-view client', async () => {
    const t = await startTestServer(ASK_EXECUTE);
    const planner = await t.createSession();
    // Accepted, not yet subscribed: what arrives now is held for the seam (streaming §3.7 step 1).
    const early = await t.attach(planner);
    await t.submit(planner, 'delegate: run: echo early > early-marker.txt');
    const pending = await eventually(() => t.runtime.pendingConfirmations(planner).length === 1, 15_000);
    expect(pending).toBe(true);
    const [request] = t.runtime.pendingConfirmations(planner);

    await subscribeOn(early, { filter: 'preset:chat', snapshot: false });
    const seen = await early.waitFor(
      (f) => f.type === 'event' && f.event.type === 'tool.confirmation_requested',
      5_000,
    );
    expect(seen.event.payload.confirmation_request_id).toBe(request!.confirmation_request_id);
    expect(seen.event.session_id).not.toBe(planner);
  });
});
