import { monotonicFactory } from 'ulid';
import type { TestClient, TestServer } from './server.js';

/** Helpers for the streaming-protocol tests (streaming spec §11.1): subscribe, wait, compare. */

export type FilterInput =
  | 'preset:chat'
  | 'preset:full'
  | { event_types: string[] | null; actors: string[] | null; include_worker_sessions: boolean };

export interface SubscribeOptions {
  readonly filter?: FilterInput;
  readonly since?: string | null;
  readonly snapshot?: boolean;
}

export interface Subscribed {
  readonly client: TestClient;
  readonly ack: any;
  /** The snapshot frame when one was asked for. */
  readonly snapshot: any | null;
}

/** A fresh handshake (new attach token), a WebSocket, and a subscribe; resolves once the ack (and snapshot) arrived. */
export async function subscribe(
  t: Pick<TestServer, 'attach'>,
  sessionId: string,
  options: SubscribeOptions = {},
): Promise<Subscribed> {
  const client = await t.attach(sessionId);
  return subscribeOn(client, options);
}

/** Subscribes an open client; throws on `subscribe_error`. */
export async function subscribeOn(client: TestClient, options: SubscribeOptions = {}): Promise<Subscribed> {
  const snapshot = options.snapshot ?? true;
  const from = client.frames.length;
  client.send({
    type: 'subscribe',
    filter: options.filter ?? 'preset:full',
    since: options.since ?? null,
    snapshot,
  });
  const reply = await client.waitFor(
    (f) => (f.type === 'subscribe_ack' || f.type === 'subscribe_error') && client.frames.indexOf(f) >= from,
  );
  if (reply.type === 'subscribe_error') throw new Error(`subscribe failed: ${JSON.stringify(reply)}`);
  const snap = snapshot
    ? await client.waitFor((f) => f.type === 'snapshot' && client.frames.indexOf(f) >= from)
    : null;
  return { client, ack: reply, snapshot: snap };
}

/** Sends a subscribe and resolves with the `subscribe_ack` or `subscribe_error` that answers it. */
export async function subscribeReply(client: TestClient, frame: Record<string, unknown>): Promise<any> {
  const from = client.frames.length;
  client.send({ type: 'subscribe', ...frame });
  return client.waitFor(
    (f) => (f.type === 'subscribe_ack' || f.type === 'subscribe_error') && client.frames.indexOf(f) >= from,
  );
}

/**
 * Resolves once the client has received `count` events matching `predicate` (counted over all its
 * frames). Counts incrementally: a check over every frame on every frame would be quadratic.
 */
export function waitForEvents(
  client: TestClient,
  predicate: (event: any) => boolean,
  count = 1,
  timeoutMs = 15_000,
): Promise<unknown> {
  let seen = client.events().filter(predicate).length;
  if (seen >= count) return Promise.resolve();
  // waitFor first searches the frames already received, which `seen` has counted: skip that pass.
  let armed = false;
  const done = client.waitFor(
    (f) => armed && f.type === 'event' && predicate(f.event) && ++seen >= count,
    timeoutMs,
  );
  armed = true;
  return done;
}

/** Resolves once the client has received `count` events of a type. */
export function waitForType(client: TestClient, type: string, count = 1, timeoutMs = 15_000) {
  return waitForEvents(client, (e) => e.type === type, count, timeoutMs);
}

/** Events of one type. */
export function ofType(events: readonly any[], type: string): any[] {
  return events.filter((e) => e.type === type);
}

/** Event types in order, runs of deltas collapsed to one `type*` entry. */
export function shapeOf(events: readonly any[]): string[] {
  const out: string[] = [];
  for (const event of events) {
    const isDelta = event.type.endsWith('.delta') || event.type === 'tool.use_input_delta';
    const label = isDelta ? `${event.type}*` : event.type;
    if (isDelta && out[out.length - 1] === label) continue;
    out.push(label);
  }
  return out;
}

/** Whether ids are strictly increasing (which also means: no duplicates). */
export function strictlyIncreasing(events: readonly { id: string }[]): boolean {
  for (let i = 1; i < events.length; i += 1) if (!(events[i - 1]!.id < events[i]!.id)) return false;
  return true;
}

/**
 * Rebuilds an assistant message's content from its streaming deltas, as a client would, to compare
 * with `message.complete.final_content` (§5.3).
 */
export function reconstruct(events: readonly any[], messageId: string): unknown[] {
  const blocks = new Map<number, any>();
  for (const e of events) {
    if (e.payload?.message_id !== messageId) continue;
    const index = e.payload.content_block_index as number;
    const block = blocks.get(index);
    switch (e.type) {
      case 'text.delta':
        blocks.set(index, { type: 'text', text: (block?.text ?? '') + e.payload.text });
        break;
      case 'thinking.delta':
        blocks.set(index, {
          type: 'thinking',
          thinking: (block?.thinking ?? '') + e.payload.text,
          signature: e.payload.signature ?? block?.signature ?? null,
        });
        break;
      case 'tool.use_start':
        blocks.set(index, {
          type: 'tool_use',
          id: e.payload.tool_use_id,
          name: e.payload.tool_name,
          partial: '',
        });
        break;
      case 'tool.use_input_delta':
        block.partial += e.payload.partial_json;
        break;
      case 'tool.use_end':
        // final_input is authoritative; the accumulated fragments must parse to the same value.
        if (JSON.stringify(JSON.parse(block.partial)) !== JSON.stringify(e.payload.final_input))
          throw new Error(`tool input fragments ${block.partial} disagree with final_input`);
        blocks.set(index, { type: 'tool_use', id: block.id, name: block.name, input: e.payload.final_input });
        break;
    }
  }
  return [...blocks.entries()].sort(([a], [b]) => a - b).map(([, block]) => block);
}

/** Polls until `check` holds (or the deadline passes); returns whether it held. */
export async function eventually(check: () => boolean, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return check();
}

/** Reads until `done` holds of what was read (or the time is up), and returns the last read. */
export async function readUntil<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Terminates the client's socket (an abrupt drop, no close handshake) once it has received `count` events. */
export function dropAfterEvents(client: TestClient, count: number): void {
  let seen = 0;
  client.ws.on('message', (data) => {
    if (String(data).startsWith('{"type":"event"') && ++seen === count) client.ws.terminate();
  });
}

/** A well-formed event id whose ULID time is `daysAgo` days in the past. */
export function eventIdDaysAgo(daysAgo: number): string {
  return `evt_${monotonicFactory()(Date.now() - daysAgo * 24 * 3600 * 1000)}`;
}

/** The id of the last event a client received, or null. */
export function lastEventId(client: TestClient): string | null {
  const events = client.events();
  return events.length === 0 ? null : events[events.length - 1].id;
}

let syncCounter = 0;

/**
 * A barrier: sends a `ping` and waits for its `pong`. The pong goes through the same outbound queue as
 * events, so once it arrives every event released before the ping was handled has arrived too.
 * Resolves false when the connection closed first.
 */
export async function sync(client: TestClient, timeoutMs = 15_000): Promise<boolean> {
  if (client.ws.readyState !== client.ws.OPEN) return false;
  const nonce = `sync-${++syncCounter}`;
  const pong = client.waitFor((f) => f.type === 'pong' && f.nonce === nonce, timeoutMs).then(() => true);
  client.send({ type: 'ping', nonce });
  return Promise.race([pong, client.closed.then(() => false)]);
}

/** Resolves when the client's connection is closed, with its close code and reason. */
export function closedWithin(
  client: TestClient,
  timeoutMs = 15_000,
): Promise<{ code: number; reason: string }> {
  return Promise.race([
    client.closed,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error('the connection did not close in time')), timeoutMs).unref(),
    ),
  ]);
}
