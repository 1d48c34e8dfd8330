import type { Check } from './checks-stream.js';
import { CheckFailure, expectEqual, expectTrue, sleep } from './context.js';
import { canonicalOrderProblems, idOrderProblems, seqProblems } from './invariants.js';

export const transportChecks: Check[] = [
  {
    name: 'slow_client_closure',
    sse: true,
    covers: '§11.1 test 11, §8',
    needsHooks: true,
    async run(ctx) {
      const session = await ctx.newSession();
      const stalled = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
      const healthy = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
      stalled.pause();
      const count = Math.max(20_000, ctx.info!.max_queue_events * 20);
      const flood = await ctx.api('POST', '/_conformance/flood', { session_id: session, count });
      expectEqual('the flood hook answers 200', 200, flood.status);
      await healthy.waitFor(
        (f) => f.type === 'event' && f.event.id === flood.body.last_event_id,
        30_000,
        'the last flooded event',
      );
      stalled.resume();
      const closed = await Promise.race([stalled.closed, sleep(15_000).then(() => null)]);
      if (closed === null)
        throw new CheckFailure('the stalled client is closed', 'close 1008', 'still open after 15 s');
      expectEqual('close code', 1008, closed.code);
      expectTrue('close reason is client_too_slow', closed.reason.includes('client_too_slow'), closed.reason);
      const received = healthy.events().filter((e) => e.type === 'feedback.implicit').length;
      expectEqual('the other client got every event', count, received);
      return undefined;
    },
  },
  {
    name: 'heartbeat',
    covers: '§11.1 test 15, §3.8',
    needsHooks: true,
    async run(ctx) {
      const interval = ctx.info!.heartbeat_interval_ms;
      const session = await ctx.newSession();
      const silent = await ctx.attach(
        session,
        { filter: 'preset:chat' },
        // Neither JSON pongs nor protocol pongs: a protocol pong is liveness too (check protocol_pong_liveness).
        { answerPings: false, protocolPongs: false, record: false },
      );
      const answering = await ctx.attach(session, { filter: 'preset:chat' }, { record: false });
      const ping = await silent.waitFor((f) => f.type === 'ping', interval * 10, 'a ping');
      expectTrue('a ping carries a nonce', typeof ping.nonce === 'string' && ping.nonce.length > 0, ping);
      const closed = await Promise.race([silent.closed, sleep(interval * 12).then(() => null)]);
      if (closed === null)
        throw new CheckFailure('a client that never answers is closed after 3 pings', 'closed', 'open');
      answering.send({ type: 'ping', nonce: 'client-nonce' });
      const pong = await answering.waitFor(
        (f) => f.type === 'pong',
        interval * 10,
        'a pong to the client ping',
      );
      expectEqual('the server answers a client ping with its nonce', 'client-nonce', pong.nonce);
      const stillOpen = await Promise.race([
        answering.closed.then(() => false),
        sleep(interval * 5).then(() => true),
      ]);
      expectTrue('a client that answers stays open', stillOpen);
      return undefined;
    },
  },
  {
    name: 'snapshot_replay_seam',
    sse: true,
    covers: '§11.1 test 16, §3.7',
    async run(ctx) {
      const session = await ctx.newSession();
      const control = await ctx.attach(session);
      let midTurn = 0;
      for (let round = 0; round < 8; round += 1) {
        const submitted = ctx.submit(session, `seam round ${round}`);
        const late = await ctx.attach(session, { filter: 'preset:full', snapshot: true }, { record: false });
        const turn = await submitted;
        const end = await ctx.turnEnd(control, turn);
        const snapshot = await late.waitFor((f) => f.type === 'snapshot', 15_000, 'the snapshot');
        // A subscription that lands after the turn ended has the whole turn in its snapshot, and no
        // event of it to stream: a server is free to be that slow to attach.
        if (snapshot.snapshot_at_event_id < end.event.id) {
          midTurn += 1;
          await ctx.turnEnd(late, turn);
        }
        const expected = control
          .events()
          .filter((e) => e.session_id === session && e.id > snapshot.snapshot_at_event_id);
        const seen = late.events().filter((e) => e.session_id === session && e.id <= expected.at(-1)?.id);
        expectEqual(
          `round ${round}: after the snapshot, exactly the control client's events`,
          expected.map((e) => e.id),
          seen.map((e) => e.id),
        );
        late.close();
      }
      return `8 rounds of subscribing while a turn starts (${midTurn} landed before the turn ended)`;
    },
  },
];

/** The invariants of DESIGN.md, checked over every full-filter stream the other checks recorded. */
export const invariantChecks: Check[] = [
  {
    name: 'invariant_id_order',
    sse: true,
    covers: 'DESIGN.md invariants 1 and 5',
    async run(ctx) {
      const problems = ctx.recorded.flatMap((frames) =>
        idOrderProblems(frames.filter((f) => f.type === 'event').map((f) => f.event)),
      );
      expectEqual('ids strictly increase on every connection', [], problems.slice(0, 5));
      return `${ctx.recorded.length} streams`;
    },
  },
  {
    name: 'invariant_seq_no_holes',
    sse: true,
    covers: 'DESIGN.md invariant 4',
    async run(ctx) {
      const problems = ctx.recorded.flatMap((frames) =>
        seqProblems(frames.filter((f) => f.type === 'event').map((f) => f.event)),
      );
      expectEqual('seq has no holes per session', [], problems.slice(0, 5));
      return `${ctx.recorded.length} streams`;
    },
  },
  {
    name: 'invariant_canonical_order',
    sse: true,
    covers: '§5.3, DESIGN.md invariant 1; final_content equals the deltas',
    async run(ctx) {
      const problems = ctx.recorded.flatMap((frames) =>
        canonicalOrderProblems(frames.filter((f) => f.type === 'event').map((f) => f.event)),
      );
      expectEqual('canonical order and final_content hold', [], problems.slice(0, 5));
      return `${ctx.recorded.length} streams`;
    },
  },
];
