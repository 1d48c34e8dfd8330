import { plural } from '../plural.js';
import type { Check } from './checks-stream.js';
import { type CheckContext, CheckFailure, expectEqual, expectTrue, sleep } from './context.js';
import { specOnlyProblems } from './spec-render.js';
import type { WireClient } from './wire-client.js';

/**
 * What a client written from the spec alone renders after a late attach or a reconnect (issue 14
 * observations 1 to 4): a snapshot consistent as of its own `snapshot_at_event_id`, a message in
 * progress started in what follows it, a pending question to the user among its events, and every
 * delta of a cursor seconds old.
 */

async function lateSnapshot(
  ctx: CheckContext,
  session: string,
): Promise<{ client: WireClient; snapshot: any }> {
  const client = await ctx.attach(session, { filter: 'preset:full', snapshot: true }, { record: false });
  const snapshot = await client.waitFor((f) => f.type === 'snapshot', 10_000, 'snapshot');
  return { client, snapshot };
}

function expectRendersRight(what: string, snapshot: any, client: WireClient): void {
  const problems = specOnlyProblems(snapshot, client.events());
  const shown =
    problems.length > 5 ? [...problems.slice(0, 5), `… and ${problems.length - 5} more`] : problems;
  expectEqual(`${what}: a spec-only client renders nothing wrong`, [], shown);
}

/** The text a client assembles from a message's `text.delta`s. */
function textOf(events: readonly any[], messageId: string): string {
  return events
    .filter((e) => e.type === 'text.delta' && e.payload.message_id === messageId)
    .map((e) => e.payload.text)
    .join('');
}

async function snapshotAsOfItsId(ctx: CheckContext): Promise<string> {
  const session = await ctx.newSession();
  const observer = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
  const turn = await ctx.submit(session, 'slow: a turn that ends while storage waits');
  await ctx.eventOf(observer, 'text.delta', (e) => e.turn_id === turn);
  // The answer goes on streaming and ends while its stored events (llm.call_completed,
  // turn.completed) wait for the lock: the runtime holds the turn over before any client may see it.
  const stall = await ctx.api('POST', '/_conformance/stall-storage', { ms: 20_000 });
  expectEqual('the stall-storage hook answers 200', 200, stall.status);
  let snapshot: any;
  let late: WireClient;
  try {
    await ctx.eventOf(observer, 'message.complete', (e) => e.turn_id === turn, 20_000);
    await sleep(100);
    ({ client: late, snapshot } = await lateSnapshot(ctx, session));
  } finally {
    await ctx.api('POST', '/_conformance/stall-storage', { ms: 0 });
  }
  await ctx.turnEnd(late, turn);
  expectRendersRight('a snapshot taken as the turn ended, storage waiting', snapshot, late);
  return `snapshot at ${snapshot.snapshot_at_event_id}, current_turn_id ${snapshot.session.current_turn_id}`;
}

async function snapshotMidAnswer(ctx: CheckContext): Promise<string> {
  const session = await ctx.newSession();
  const observer = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
  const turn = await ctx.submit(session, 'slow: attach in the middle of this');
  await observer.waitFor(
    () => observer.events().filter((e) => e.type === 'text.delta' && e.turn_id === turn).length >= 5,
    15_000,
    'five text deltas',
  );
  const { client: late, snapshot } = await lateSnapshot(ctx, session);
  await ctx.turnEnd(late, turn);
  await ctx.turnEnd(observer, turn);
  expectRendersRight('a snapshot mid-answer', snapshot, late);
  const complete = observer.events().find((e) => e.type === 'message.complete' && e.turn_id === turn);
  const messageId = complete.payload.message_id as string;
  expectEqual(
    'the answer the late client assembled from its deltas is the whole answer',
    textOf(observer.events(), messageId),
    textOf(late.events(), messageId),
  );
  const deltas = (client: WireClient) =>
    client.events().filter((e) => e.type === 'text.delta' && e.payload.message_id === messageId).length;
  return `the late client got ${deltas(late)} of the answer's ${deltas(observer)} deltas, message.start first`;
}

async function snapshotPendingConfirmation(ctx: CheckContext): Promise<string> {
  const session = await ctx.newSession();
  const observer = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
  // A file outside the workspace: metis asks before reading it (runtime.outside_workspace "ask").
  const turn = await ctx.submit(session, 'read: /etc/hostname');
  const asked = await Promise.race([
    ctx.eventOf(observer, 'tool.confirmation_requested', (e) => e.turn_id === turn),
    ctx.turnEnd(observer, turn).then(() => null),
  ]);
  if (asked === null)
    throw new CheckFailure(
      'reading a file outside the workspace asks for confirmation (this check needs a question pending)',
      'tool.confirmation_requested',
      observer.events().map((e) => e.type),
    );
  const id = asked.payload.confirmation_request_id as string;
  const { client: late, snapshot } = await lateSnapshot(ctx, session);
  const seen = await Promise.race([
    ctx.eventOf(late, 'tool.confirmation_requested', (e) => e.payload.confirmation_request_id === id, 6_000),
    sleep(5_000).then(() => null),
  ]);
  expectTrue(
    'a late snapshot client gets the pending tool.confirmation_requested among its events',
    seen !== null,
    late.events().map((e) => e.type),
  );
  const answer = await ctx.api('POST', `/sessions/${session}/confirmations/${id}`, { decision: 'deny' });
  expectEqual('the late client can answer it: 200', 200, answer.status);
  await ctx.turnEnd(late, turn);
  expectRendersRight('a snapshot while a question waits', snapshot, late);
  return `confirmation ${id} after snapshot ${snapshot.snapshot_at_event_id}`;
}

async function resumeWindow(ctx: CheckContext): Promise<string> {
  const session = await ctx.newSession();
  const observer = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
  const first = await ctx.submit(session, 'hello');
  await ctx.turnEnd(observer, first);
  const cursor = observer.events().at(-1).id as string;
  // More model calls than a memory of the last few messages holds.
  let last = first;
  for (let i = 0; i < 6; i += 1) {
    last = await ctx.submit(session, `hello ${i}`);
    await ctx.turnEnd(observer, last);
  }
  const resumed = await ctx.attach(session, { filter: 'preset:full', since: cursor }, { record: false });
  const reply = resumed.frames.find((f) => f.type === 'subscribe_ack' || f.type === 'subscribe_error');
  expectEqual('a cursor six model calls old is acknowledged', 'subscribe_ack', reply.type);
  await ctx.turnEnd(resumed, last);
  const missed = observer.events().filter((e) => e.id > cursor);
  expectEqual(
    'the replay is every event after the cursor, deltas included',
    missed.map((e) => e.id),
    resumed.events().map((e) => e.id),
  );
  return `${plural(missed.length, 'event')} replayed, ${missed.filter((e) => e.type === 'text.delta').length} of them deltas`;
}

export const snapshotPointChecks: Check[] = [
  {
    name: 'snapshot_as_of_its_id',
    sse: true,
    covers: '§3.4, §3.7 (issue 14 obs. 1)',
    needsHooks: true,
    run: snapshotAsOfItsId,
  },
  { name: 'snapshot_mid_answer', sse: true, covers: '§3.4, §3.7 (issue 14 obs. 2)', run: snapshotMidAnswer },
  {
    name: 'snapshot_pending_confirmation',
    sse: true,
    covers: '§3.4, §6 (issue 14 obs. 4)',
    run: snapshotPendingConfirmation,
  },
  { name: 'resume_window', sse: true, covers: '§3.6 (issue 14 obs. 3)', run: resumeWindow },
];
