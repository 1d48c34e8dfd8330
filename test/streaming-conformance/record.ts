/**
 * Records the streaming conformance traces from the REAL server (see README.md in this folder):
 *
 *   node --import tsx test/streaming-conformance/record.ts            # every scenario
 *   node --import tsx test/streaming-conformance/record.ts plain-turn # some of them
 *
 * Each scenario starts a server on port 0 over a temporary SQLite file with the scripted model,
 * attaches a raw `ws` client, drives the scenario, and writes `<name>.jsonl` (every server→client
 * frame, byte for byte as received, one per line) and `<name>.expected.json` (the reducer's final
 * state, projected with `projectState`). Before writing, the expected state is checked against what
 * the server stored (messages, tool calls, turn outcomes), so a reducer bug cannot slip into an
 * expected file unnoticed.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import WebSocket from 'ws';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { projectBlock, projectState, type StateProjection } from '../../src/client/state-projection.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import { type MetisServer, startServer } from '../../src/core/app/metis-server.js';
import { openTraceContext, type TraceContext } from '../../src/core/store/trace-context.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';

const HERE = dirname(fileURLToPath(import.meta.url));

interface Rig {
  readonly url: string;
  readonly runtime: Runtime;
  readonly context: TraceContext;
  readonly server: MetisServer;
  readonly workspace: string;
  createSession(): Promise<string>;
  submit(sessionId: string, message: string): Promise<string>;
  connect(sessionId: string): Promise<Recorder>;
  stop(): Promise<void>;
}

/** What `test/helpers/server.ts` builds, without vitest: a real server over a real SQLite file. */
async function startRig(
  config: RuntimeConfigInput = {},
  beforeToolExecute?: () => Promise<void>,
): Promise<Rig> {
  const home = mkdtempSync(join(tmpdir(), 'metis-record-'));
  const workspace = mkdtempSync(join(tmpdir(), 'metis-ws-'));
  const context = openTraceContext({ dbPath: join(home, 'metis.db'), validation: 'strict' });
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: testRuntimeConfig(config),
    beforeToolExecute,
  });
  const server = await startServer(runtime, context, { port: 0 });
  const request = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const parsed = (await response.json()) as Record<string, any>;
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(parsed)}`);
    return parsed;
  };
  return {
    url: server.url,
    runtime,
    context,
    server,
    workspace,
    createSession: async () => (await request('POST', '/sessions', { workspace_path: workspace })).session_id,
    submit: async (sessionId, message) =>
      (await request('POST', `/sessions/${sessionId}/turns`, { message })).turn_id,
    connect: async (sessionId) =>
      Recorder.open((await request('GET', `/sessions/${sessionId}`)).ws_url as string),
    stop: async () => {
      await server.close();
      await runtime.close();
      await context.close();
      rmSync(home, { recursive: true, force: true });
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}

/** A raw WebSocket that keeps every frame's text exactly as received. */
class Recorder {
  readonly raw: string[] = [];
  readonly frames: Frame[] = [];
  private readonly waiters: { predicate: (f: Frame) => boolean; resolve: () => void }[] = [];
  private nonce = 0;
  /** Stop recording after this frame (a simulated drop keeps only what arrived before it). */
  private stopAfter: ((f: Frame) => boolean) | null = null;
  private stopped = false;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      if (this.stopped) return;
      const text = String(data);
      const frame = JSON.parse(text) as Frame;
      // The recorder's own barrier pings are answered by pongs that are not part of the scenario.
      if (!(frame.type === 'pong' && String(frame.nonce).startsWith('record-'))) {
        this.raw.push(text);
        this.frames.push(frame);
      }
      if (this.stopAfter?.(frame)) {
        this.stopped = true;
        ws.terminate();
      }
      for (const waiter of [...this.waiters]) {
        if (waiter.predicate(frame)) {
          this.waiters.splice(this.waiters.indexOf(waiter), 1);
          waiter.resolve();
        }
      }
    });
  }

  static open(url: string): Promise<Recorder> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.once('error', reject);
      ws.once('open', () => resolve(new Recorder(ws)));
    });
  }

  send(frame: unknown): void {
    this.ws.send(JSON.stringify(frame));
  }

  events(): Record<string, any>[] {
    return this.frames.filter((f) => f.type === 'event').map((f) => f.event);
  }

  lastEventId(): string | null {
    const events = this.events();
    return events.length === 0 ? null : (events[events.length - 1]!.id as string);
  }

  waitFor(predicate: (frame: Frame) => boolean, timeoutMs = 15_000): Promise<void> {
    if (this.frames.some(predicate)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('timed out waiting for a frame')), timeoutMs);
      this.waiters.push({
        predicate,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }

  waitForEvent(predicate: (event: Record<string, any>) => boolean, count = 1): Promise<void> {
    let seen = 0;
    return this.waitFor((f) => f.type === 'event' && predicate(f.event) && ++seen >= count);
  }

  async subscribe(filter: unknown, since: string | null, snapshot: boolean): Promise<void> {
    this.send({ type: 'subscribe', filter, since, snapshot });
    await this.waitFor((f) => f.type === 'subscribe_ack' || f.type === 'subscribe_error');
    if (snapshot) await this.waitFor((f) => f.type === 'snapshot');
  }

  /** Everything released before this call has arrived once the pong is back (one outbound queue). */
  async barrier(): Promise<void> {
    const nonce = `record-${++this.nonce}`;
    const pong = new Promise<void>((resolve) => {
      this.waiters.push({ predicate: (f) => f.type === 'pong' && f.nonce === nonce, resolve });
    });
    this.send({ type: 'ping', nonce });
    await pong;
  }

  dropAfter(predicate: (frame: Frame) => boolean): void {
    this.stopAfter = predicate;
  }

  close(): void {
    this.ws.terminate();
  }
}

const turnEnded = (turnId: string) => (e: Record<string, any>) =>
  (e.type === 'turn.completed' || e.type === 'turn.cancelled') && e.turn_id === turnId;

const FULL = 'preset:full';
const WITH_WORKERS = { event_types: null, actors: null, include_worker_sessions: true };

interface Recorded {
  /** Raw frame texts, in the order a client received them (connections concatenated). */
  readonly lines: string[];
  readonly rig: Rig;
  /** Sessions whose stored state the expected projection is checked against. */
  readonly sessions: string[];
  /** Ids of messages the trace carries only as a snapshot (not re-checked against streaming). */
  readonly expectMismatches?: number;
}

type Scenario = () => Promise<Recorded>;

/** Attach with a snapshot, run one turn, wait for its end and a barrier. */
async function oneTurn(message: string, config: RuntimeConfigInput = {}, filter: unknown = FULL) {
  const rig = await startRig(config);
  const sessionId = await rig.createSession();
  const client = await rig.connect(sessionId);
  await client.subscribe(filter, null, true);
  const turnId = await rig.submit(sessionId, message);
  await client.waitForEvent(turnEnded(turnId));
  await rig.context.flush();
  await client.barrier();
  client.close();
  return { rig, sessionId, lines: client.raw };
}

/** Starts a `slow:` turn and resolves with its id once six of its deltas have streamed. */
async function slowTurnSixDeltasIn(rig: Rig, sessionId: string): Promise<string> {
  let deltas = 0;
  let sixth!: () => void;
  const sixDeltas = new Promise<void>((resolve) => {
    sixth = resolve;
  });
  const unsubscribe = rig.runtime.streaming.subscribe((e) => {
    if (e.type === 'text.delta' && ++deltas === 6) sixth();
  });
  const turnId = await rig.submit(sessionId, 'slow: tides');
  await sixDeltas;
  unsubscribe();
  return turnId;
}

const SCENARIOS: Record<string, Scenario> = {
  'plain-turn': async () => {
    const { rig, sessionId, lines } = await oneTurn('hello there');
    return { rig, lines, sessions: [sessionId] };
  },

  thinking: async () => {
    const { rig, sessionId, lines } = await oneTurn('think: why is the sky blue');
    return { rig, lines, sessions: [sessionId] };
  },

  'tool-use': async () => {
    const { rig, sessionId, lines } = await oneTurn('time');
    return { rig, lines, sessions: [sessionId] };
  },

  /** A client attaches to a session with history: the snapshot's messages, then a live turn. */
  'snapshot-then-turn': async () => {
    const rig = await startRig();
    const sessionId = await rig.createSession();
    await rig.submit(sessionId, 'hello');
    await rig.runtime.currentTurn(sessionId)?.done;
    await rig.context.flush();
    const client = await rig.connect(sessionId);
    await client.subscribe(FULL, null, true);
    const turnId = await rig.submit(sessionId, 'think: time');
    await client.waitForEvent(turnEnded(turnId));
    await rig.context.flush();
    await client.barrier();
    client.close();
    return { rig, lines: client.raw, sessions: [sessionId] };
  },

  /**
   * A client attaches while a message streams: the snapshot is taken before the message's model call
   * started, and the call's events (message.start and the deltas so far) follow it (issue 14 obs. 2).
   */
  'attach-mid-message': async () => {
    const rig = await startRig({ scripted: { slow_token_delay_ms: 10, slow_tokens: 30 } });
    const sessionId = await rig.createSession();
    const turnId = await slowTurnSixDeltasIn(rig, sessionId);
    const client = await rig.connect(sessionId);
    await client.subscribe(FULL, null, true);
    await client.waitForEvent(turnEnded(turnId));
    await rig.context.flush();
    await client.barrier();
    client.close();
    // Six deltas had streamed before the attach (slowTurnSixDeltasIn): the message must start after it.
    if (!client.events().some((e) => e.type === 'message.start'))
      throw new Error('the message did not start after the snapshot');
    return { rig, lines: client.raw, sessions: [sessionId] };
  },

  /**
   * A client subscribes live (no snapshot, no cursor) while a message streams: its first frames are
   * deltas of a message it never saw start; `message.complete.final_content` gives it the message.
   */
  'live-attach-mid-message': async () => {
    const rig = await startRig({ scripted: { slow_token_delay_ms: 10, slow_tokens: 30 } });
    const sessionId = await rig.createSession();
    const turnId = await slowTurnSixDeltasIn(rig, sessionId);
    const client = await rig.connect(sessionId);
    await client.subscribe(FULL, null, false);
    await client.waitForEvent(turnEnded(turnId));
    await rig.context.flush();
    await client.barrier();
    client.close();
    const first = client.events()[0]!;
    if (first.type !== 'text.delta') throw new Error(`attached too late: first event ${first.type}`);
    return { rig, lines: client.raw, sessions: [sessionId] };
  },

  /** The connection drops after the 8th text.delta; a new one resumes with `since`. */
  'reconnect-mid-message': async () => {
    const rig = await startRig({ scripted: { slow_token_delay_ms: 10, slow_tokens: 30 } });
    const sessionId = await rig.createSession();
    const first = await rig.connect(sessionId);
    await first.subscribe(FULL, null, true);
    let deltas = 0;
    first.dropAfter((f) => f.type === 'event' && f.event.type === 'text.delta' && ++deltas === 8);
    const turnId = await rig.submit(sessionId, 'slow: tides');
    await first.waitFor((f) => f.type === 'event' && f.event.type === 'text.delta' && deltas >= 8);
    const cursor = first.lastEventId();
    const second = await rig.connect(sessionId);
    await second.subscribe(FULL, cursor, false);
    await second.waitForEvent(turnEnded(turnId));
    await rig.context.flush();
    await second.barrier();
    second.close();
    const ack = second.frames[0]!;
    if (ack.type !== 'subscribe_ack' || ack.replay_event_count === 0) throw new Error('nothing replayed');
    return { rig, lines: [...first.raw, ...second.raw], sessions: [sessionId] };
  },

  /** §10.3b: cancel while text streams. */
  'cancel-mid-llm': async () => {
    const rig = await startRig({ scripted: { slow_token_delay_ms: 5, slow_tokens: 200 } });
    const sessionId = await rig.createSession();
    const client = await rig.connect(sessionId);
    await client.subscribe(FULL, null, true);
    const turnId = await rig.submit(sessionId, 'slow: the history of rivers');
    await client.waitForEvent((e) => e.type === 'text.delta', 5);
    client.send({ type: 'cancel', turn_id: turnId, reason: 'user_cancel' });
    await client.waitForEvent(turnEnded(turnId));
    await rig.context.flush();
    await client.barrier();
    client.close();
    return { rig, lines: client.raw, sessions: [sessionId] };
  },

  /** §10.3: cancel while `sleep 5` runs. */
  'cancel-mid-tool': async () => {
    let starting!: () => void;
    const toolStarting = new Promise<void>((resolve) => {
      starting = resolve;
    });
    const rig = await startRig({}, async () => starting());
    const sessionId = await rig.createSession();
    const client = await rig.connect(sessionId);
    await client.subscribe(FULL, null, true);
    const turnId = await rig.submit(sessionId, 'run: sleep 5');
    await toolStarting;
    await new Promise((resolve) => setTimeout(resolve, 200));
    client.send({ type: 'cancel', turn_id: turnId, reason: 'user_cancel' });
    await client.waitForEvent(turnEnded(turnId));
    await rig.context.flush();
    await client.barrier();
    client.close();
    return { rig, lines: client.raw, sessions: [sessionId] };
  },

  /** §10.6 with include_worker_sessions: the worker's events interleave with the planner's. */
  'worker-session': async () => {
    const { rig, sessionId, lines } = await oneTurn('delegate: summarize the sea', {}, WITH_WORKERS);
    const workers = rig.runtime.sessions.childSessionIds(sessionId);
    if (workers.length !== 1) throw new Error(`expected one worker, got ${workers.length}`);
    return { rig, lines, sessions: [sessionId, ...workers] };
  },
};

/** The plain trace with one text.delta altered: the deltas no longer add up to final_content. */
function mismatchFrom(plainLines: readonly string[]): string[] {
  let edited = false;
  return plainLines.map((line) => {
    const frame = JSON.parse(line) as Frame;
    if (edited || frame.type !== 'event' || frame.event.type !== 'text.delta') return line;
    edited = true;
    frame.event.payload.text = `${frame.event.payload.text}[garbled] `;
    return JSON.stringify(frame);
  });
}

/** The plain trace with its third text.delta sent twice, as a replay after a reconnect may. */
function duplicateFrom(plainLines: readonly string[]): string[] {
  let deltas = 0;
  return plainLines.flatMap((line) => {
    const frame = JSON.parse(line) as Frame;
    if (frame.type !== 'event' || frame.event.type !== 'text.delta') return [line];
    deltas += 1;
    return deltas === 3 ? [line, line] : [line];
  });
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** The next id after `id` in ULID order (the last character counted up, with carry). */
function nextId(id: string): string {
  const chars = id.split('');
  for (let i = chars.length - 1; i >= 0; i -= 1) {
    const digit = CROCKFORD.indexOf(chars[i]!);
    if (digit < CROCKFORD.length - 1) {
      chars[i] = CROCKFORD[digit + 1]!;
      return chars.join('');
    }
    chars[i] = '0';
  }
  throw new Error(`no id after ${id}`);
}

/**
 * The plain trace from a newer server (streaming §9.2): fields this client does not know in an
 * envelope and in a payload, and an event of a type it does not know after the last one.
 */
function unknownTypeFrom(plainLines: readonly string[]): string[] {
  const lines = plainLines.map((line) => {
    const frame = JSON.parse(line) as Frame;
    if (frame.type !== 'event' || frame.event.type !== 'message.complete') return line;
    frame.event.trace_flags = 'sampled';
    frame.event.payload.citations = [];
    return JSON.stringify(frame);
  });
  const last = [...lines].reverse().map((line) => JSON.parse(line) as Frame).find((f) => f.type === 'event')!;
  const { event } = last;
  const future = {
    ...event,
    id: nextId(event.id),
    seq: typeof event.seq === 'number' ? event.seq + 1 : event.seq,
    type: 'hologram.rendered',
    payload: { hologram_id: 'holo_1', frames: 24 },
  };
  return [...lines, JSON.stringify({ type: 'event', event: future })];
}

/** Traces made by editing a recorded one, each with the state a correct client must end in. */
const DERIVED: Record<string, { from: string; derive: (lines: readonly string[]) => string[]; expect: (plain: StateProjection, last: string) => StateProjection }> = {
  // final_content wins: the state is the plain turn's, with the mismatch counted.
  'final-content-mismatch': { from: 'plain-turn', derive: mismatchFrom, expect: (plain) => ({ ...plain, mismatches: 1 }) },
  // The duplicate is ignored: the state is the plain turn's exactly.
  'duplicate-event': { from: 'plain-turn', derive: duplicateFrom, expect: (plain) => plain },
  // Unknown fields are ignored; the unknown event is skipped and counted, and it moves the cursor.
  'unknown-event-type': {
    from: 'plain-turn',
    derive: unknownTypeFrom,
    expect: (plain, last) => ({ ...plain, unknown_skipped: 1, last_event_id: last }),
  },
};

export function finalState(lines: readonly string[]): StateProjection {
  let state = initialState;
  for (const line of lines) state = reduce(state, JSON.parse(line) as Frame);
  return projectState(state);
}

const TOOL_STATUS: Record<string, string> = {
  pending: 'requested',
  running: 'running',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
};

/** Checks the projection against the server's own stored truth; throws on any difference. */
function crossCheck(name: string, projection: StateProjection, recorded: Recorded): void {
  const problems: string[] = [];
  const { rig } = recorded;
  const messages = new Map(projection.messages.map((m) => [m.id, m]));
  for (const sessionId of recorded.sessions) {
    for (const stored of rig.runtime.sessions.messages(sessionId, { limit: 1000 })) {
      const seen = messages.get(stored.id);
      if (!seen) {
        if (stored.role === 'assistant') problems.push(`assistant message ${stored.id} missing`);
        continue;
      }
      const blocks = (stored.content as any[]).map((b) =>
        projectBlock(
          b.type === 'tool_use' ? { ...b, partial_json: '', input: b.input } : { signature: null, ...b },
        ),
      );
      if (!isDeepStrictEqual(seen.blocks, blocks))
        problems.push(
          `message ${stored.id}: blocks ${JSON.stringify(seen.blocks)} != stored ${JSON.stringify(blocks)}`,
        );
      if (seen.status !== stored.status)
        problems.push(`message ${stored.id}: status ${seen.status} != stored ${stored.status}`);
    }
    const calls = rig.context.db
      .prepare('SELECT id, status, tool_name, error_class FROM tool_calls WHERE session_id = ?')
      .all(sessionId) as { id: string; status: string; tool_name: string; error_class: string | null }[];
    for (const call of calls) {
      const seen = projection.tools.find((t) => t.tool_use_id === call.id);
      if (!seen) problems.push(`tool ${call.id} missing`);
      else if (seen.status !== TOOL_STATUS[call.status] || seen.tool_name !== call.tool_name)
        problems.push(`tool ${call.id}: ${seen.status} ${seen.tool_name} != stored ${call.status}`);
    }
    const ends = rig.context.db
      .prepare(
        "SELECT turn_id, type FROM events WHERE session_id = ? AND type IN ('turn.completed', 'turn.cancelled')",
      )
      .all(sessionId) as { turn_id: string; type: string }[];
    const traced = new Set(
      recorded.lines.map((l) => JSON.parse(l) as Frame).flatMap((f) => (f.type === 'event' ? [f.event.turn_id] : [])),
    );
    for (const end of ends) {
      if (!traced.has(end.turn_id)) continue; // ended before the client attached: not in its state
      const seen = projection.turns.find((t) => t.turn_id === end.turn_id);
      const status = end.type === 'turn.completed' ? 'completed' : 'cancelled';
      if (seen?.status !== status) problems.push(`turn ${end.turn_id}: ${seen?.status} != ${status}`);
    }
  }
  if (projection.mismatches !== (recorded.expectMismatches ?? 0))
    problems.push(`mismatches ${projection.mismatches}`);
  if (projection.unknown_skipped !== 0) problems.push(`unknown_skipped ${projection.unknown_skipped}`);
  if (messages.size !== projection.messages.length) problems.push('a message appears twice');
  if (problems.length > 0) throw new Error(`${name}:\n  ${problems.join('\n  ')}`);
}

function write(name: string, lines: readonly string[], projection: StateProjection): void {
  writeFileSync(join(HERE, `${name}.jsonl`), `${lines.join('\n')}\n`);
  writeFileSync(join(HERE, `${name}.expected.json`), `${JSON.stringify(projection, null, 2)}\n`);
  console.log(`${name}: ${lines.length} frames`);
}

async function main(): Promise<void> {
  const wanted = process.argv.slice(2);
  const chosen = (name: string) => wanted.length === 0 || wanted.includes(name);
  for (const name of Object.keys(SCENARIOS).filter(chosen)) {
    const recorded = await SCENARIOS[name]!();
    try {
      const projection = finalState(recorded.lines);
      crossCheck(name, projection, recorded);
      write(name, recorded.lines, projection);
    } finally {
      await recorded.rig.stop();
    }
  }
  for (const [name, { from, derive, expect }] of Object.entries(DERIVED).filter(([n]) => chosen(n))) {
    const source = readFileSync(join(HERE, `${from}.jsonl`), 'utf8').trimEnd().split('\n');
    const lines = derive(source);
    const projection = finalState(lines);
    const lastId = (JSON.parse(lines.at(-1)!) as Frame).event?.id ?? null;
    if (!isDeepStrictEqual(projection, expect(finalState(source), lastId))) {
      throw new Error(`${name}: the reducer's state is not the one this trace must end in`);
    }
    write(name, lines, projection);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await main();
}
