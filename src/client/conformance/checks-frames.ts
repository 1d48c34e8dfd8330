import { plural } from '../plural.js';
import type { Check } from './checks-stream.js';
import { type CheckContext, CheckFailure, expectEqual, expectTrue, sleep } from './context.js';
import type { WireClient } from './wire-client.js';

/**
 * Checks of the client → server direction (issue 14 observations 5, 8, 9): a client newer than the
 * server (extra fields, §2.2's `ack`, the bus spec's `session_ids`) is understood, a socket is never
 * closed for subscribing late, and a generic WebSocket client stays connected on protocol pongs alone.
 */

/** The frames after index `from` that answer with an error. */
function errorsAfter(client: WireClient, from: number): any[] {
  return client.frames.slice(from).filter((f) => f.type === 'error' || f.type === 'subscribe_error');
}

/** Sends a ping and waits for its pong: every frame sent before it has been handled. */
async function roundTrip(client: WireClient, nonce: string, extra: Record<string, unknown> = {}) {
  const from = client.frames.length;
  client.send({ type: 'ping', nonce, ...extra });
  // Only a refusal of this ping counts against it: an earlier frame's own answer (a cancel of a turn
  // that does not exist is answered turn_not_found) may arrive before or after the pong.
  const refusal = (f: any) =>
    f.type === 'error' && f.code === 'invalid_frame' && client.frames.indexOf(f) >= from;
  const pong = await Promise.race([
    client.waitFor((f) => f.type === 'pong' && f.nonce === nonce, 5_000, `the pong to ${nonce}`),
    client.waitFor(refusal, 5_000, 'a refusal').then((error) => {
      throw new CheckFailure(`ping ${JSON.stringify(extra)} is answered with a pong`, 'pong', error);
    }),
  ]);
  return pong;
}

async function subscribeWith(client: WireClient, frame: Record<string, unknown>): Promise<any> {
  const from = client.frames.length;
  client.send({ type: 'subscribe', since: null, snapshot: false, ...frame });
  return client.waitFor(
    // A plain `error` answers too: it is how a server that refuses the frame itself replies.
    (f) =>
      (f.type === 'subscribe_ack' || f.type === 'subscribe_error' || f.type === 'error') &&
      client.frames.indexOf(f) >= from,
    10_000,
    'subscribe_ack',
  );
}

async function forwardCompatible(ctx: CheckContext): Promise<string> {
  const session = await ctx.newSession();
  const client = await ctx.attach(session, null);
  const ack = await subscribeWith(client, {
    filter: {
      event_types: null,
      actors: null,
      include_worker_sessions: false,
      session_ids: [session],
      from_the_future: true,
    },
    client_version: '99.0',
  });
  expectEqual('a subscribe with unknown fields and session_ids is acknowledged', 'subscribe_ack', ack.type);
  expectEqual('resolved_filter.session_ids', [session], ack.resolved_filter?.session_ids);
  const from = client.frames.length;
  await roundTrip(client, 'fc-1', { sent_at: 1 });
  client.send({ type: 'ack', event_id: 'evt_0', note: 'future' });
  client.send({ type: 'cancel', turn_id: 'turn_none', origin: 'future-client' });
  await roundTrip(client, 'fc-2');
  const refusals = errorsAfter(client, from).filter((f) => f.code === 'invalid_frame');
  expectEqual('ack and frames with unknown fields are not refused', [], refusals);
  const other = await ctx.newSession();
  const probe = await ctx.attach(session, null);
  const refused = await subscribeWith(probe, {
    filter: { event_types: null, actors: null, session_ids: [other] },
  });
  expectEqual('session_ids naming another session is refused', 'invalid_filter', refused.code);
  const strict = await subscribeWith(probe, { filter: { event_types: 'turn.started' } });
  expectEqual('a filter field of the wrong type is still refused', 'invalid_filter', strict.code);
  return 'unknown fields ignored, ack accepted, session_ids understood';
}

async function earlySocket(ctx: CheckContext): Promise<string> {
  const session = await ctx.newSession();
  const control = await ctx.attach(session, { filter: 'preset:full' }, { record: false });
  const early = await ctx.attach(session, null);
  const count = Math.max(1_100, ctx.info!.max_queue_events * 2);
  const flood = await ctx.api('POST', '/_conformance/flood', { session_id: session, count });
  expectEqual('the flood hook answers 200', 200, flood.status);
  await control.waitFor(
    (f) => f.type === 'event' && f.event.id === flood.body.last_event_id,
    30_000,
    'the last flooded event',
  );
  const closed = await Promise.race([early.closed, sleep(300).then(() => null)]);
  if (closed !== null)
    throw new CheckFailure('a socket that has not subscribed yet stays open', 'open', closed);
  const ack = await subscribeWith(early, { filter: 'preset:full' });
  expectEqual('the late subscribe is acknowledged', 'subscribe_ack', ack.type);
  await early.waitFor(
    (f) => f.type === 'event' && f.event.id === flood.body.last_event_id,
    30_000,
    'the last flooded event on the late socket',
  );
  const seen = early.events().filter((e) => e.type === 'feedback.implicit').length;
  expectEqual('the late live subscribe gets every event since accept', count, seen);
  return `${plural(count, 'event')} before subscribe`;
}

async function protocolPongs(ctx: CheckContext): Promise<string> {
  const interval = ctx.info!.heartbeat_interval_ms;
  const session = await ctx.newSession();
  // Like wscat: never a JSON pong, but its library answers protocol pings.
  const generic = await ctx.attach(
    session,
    { filter: 'preset:chat' },
    { answerPings: false, protocolPongs: true, record: false },
  );
  const intervals = 10;
  const closed = await Promise.race([generic.closed, sleep(interval * intervals).then(() => null)]);
  if (closed !== null)
    throw new CheckFailure(
      `a client that answers protocol pings stays open for ${intervals} heartbeat intervals`,
      'open',
      closed,
    );
  const pings = generic.frames.filter((f) => f.type === 'ping').length;
  expectTrue('the JSON pings went unanswered (more than 3)', pings > 3, pings);
  return `${pings} JSON pings unanswered, still open`;
}

export const frameChecks: Check[] = [
  {
    name: 'client_frames_forward_compat',
    covers: '§9.2 both ways, §2.2 ack, event-bus §3.1 session_ids (issue 14 obs. 5)',
    run: forwardCompatible,
  },
  {
    name: 'early_socket_burst',
    covers: '§3.7 step 1, §8 (issue 14 obs. 8; hook flood)',
    needsHooks: true,
    run: earlySocket,
  },
  {
    name: 'protocol_pong_liveness',
    covers: '§3.8 with generic clients (issue 14 obs. 9)',
    needsHooks: true,
    run: protocolPongs,
  },
];
