/**
 * The server process of the stream benchmark: `node --expose-gc --import tsx stream-server.ts <mode> <dir>`,
 * driven by bench/stream.ts over IPC. One server per process, so the clients (another process) never
 * share its event loop and its memory figures are its own.
 *
 *   metis  the real thing: trace store in <dir>, runtime, startServer with the default stream options;
 *          deltas go through `runtime.streaming.publish` → sequencer → hub → every attached client.
 *   ws     the bare baseline: an HTTP server with a `ws` WebSocketServer (same options as metis's)
 *          that sends each frame with one `send` per client.
 *   sio    socket.io broadcasting the same events with `io.emit` (WebSocket transport only).
 *
 * Deltas carry `#<seq>:<send time>` as their text (stream-wire.ts) so the clients can check order and
 * completeness and measure latency against the shared monotonic clock.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { Server as SioServer } from 'socket.io';
import { type WebSocket, WebSocketServer } from 'ws';
import { type MetisServer, startServer } from '../../src/core/app/metis-server.js';
import { microsToIso, nowMicros } from '../../src/core/events/clock.js';
import { newEventId } from '../../src/core/events/ids.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import { openTraceContext, type TraceContext } from '../../src/core/store/trace-context.js';
import { BENCH_EVENT_TYPE, benchInput, benchPayload } from './store-fixtures.js';
import { type Handlers, serveRpc } from './stream-ipc.js';
import { deltaText, nowNs, type WireTarget } from './stream-wire.js';

type Mode = 'metis' | 'ws' | 'wsc' | 'sio';

/** Deltas per assistant message: the metis server keeps in-flight messages' deltas for replay. */
const DELTAS_PER_MESSAGE = 1_000;
const MAX_PAYLOAD = 1024 * 1024;

interface Emitter {
  readonly target: WireTarget;
  /** Publishes delta `seq`; metis: to `sessionId` (default: the first session). */
  emit(seq: number, sessionId?: string): void;
  /** Metis: a target for a new session of the same server; the others have no sessions. */
  newSession(): Promise<WireTarget>;
  /** Live client connections (metis: attached to the hub; others: open sockets). */
  connections(): number;
  prepareReplay(count: number): Promise<{ sessionId: string; since: string | null; url: string | null }>;
  close(): Promise<void>;
}

const mode = process.argv[2] as Mode;
const dir = process.argv[3]!;
if (!['metis', 'ws', 'wsc', 'sio'].includes(mode) || dir === undefined) {
  throw new Error('usage: stream-server.ts <metis|ws|wsc|sio> <dir>');
}

const immediate = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A text.delta envelope exactly as the streaming channel stamps one. */
function deltaEvent(sessionId: string, turnId: string, parentId: string, messageId: string, seq: number) {
  return {
    id: newEventId(),
    timestamp: microsToIso(nowMicros()),
    session_id: sessionId,
    turn_id: turnId,
    parent_event_id: parentId,
    type: 'text.delta',
    actor: 'agent',
    payload: { message_id: messageId, content_block_index: 0, text: deltaText(seq) },
    sensitivity: 'private',
    seq: null,
  };
}

async function listen(server: HttpServer): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function startMetis(): Promise<Emitter> {
  const context: TraceContext = openTraceContext({ dbPath: join(dir, 'metis.db') });
  const runtime: Runtime = createRuntime({ bus: context.bus, store: context.port });
  const server: MetisServer = await startServer(runtime, context, { port: 0 });
  /** Per session: the turn and the assistant message its deltas belong to. */
  interface Stream {
    readonly turnId: string;
    readonly parentId: string;
    message: number;
    inMessage: number;
  }
  const streams = new Map<string, Stream>();
  const newSession = async () => {
    const session = runtime.createSession({ workspacePath: dir });
    await context.flush();
    streams.set(session.id, {
      turnId: `turn_${newEventId().slice(4)}`,
      parentId: newEventId(),
      message: 0,
      inMessage: 0,
    });
    return session.id;
  };
  const firstSession = await newSession();
  const firstId = context.db.prepare('SELECT min(id) FROM events WHERE session_id = ?').pluck();
  return {
    target: { kind: 'metis', baseUrl: server.url, sessionId: firstSession },
    newSession: async () => ({ kind: 'metis', baseUrl: server.url, sessionId: await newSession() }),
    emit: (seq, sessionId = firstSession) => {
      const stream = streams.get(sessionId)!;
      const { turnId, parentId } = stream;
      const messageId = `msg_bench_${stream.message}`;
      if (stream.inMessage === 0) {
        runtime.streaming.publish({
          type: 'message.start',
          session_id: sessionId,
          turn_id: turnId,
          parent_event_id: parentId,
          payload: { message_id: messageId, role: 'assistant', model: 'scripted:demo' },
        });
      }
      runtime.streaming.publish({
        type: 'text.delta',
        session_id: sessionId,
        turn_id: turnId,
        parent_event_id: parentId,
        payload: { message_id: messageId, content_block_index: 0, text: deltaText(seq) },
      });
      stream.inMessage += 1;
      if (stream.inMessage === DELTAS_PER_MESSAGE) {
        // Completing the message lets the server forget its deltas, as a real turn would.
        runtime.streaming.publish({
          type: 'message.complete',
          session_id: sessionId,
          turn_id: turnId,
          parent_event_id: parentId,
          payload: {
            message_id: messageId,
            stop_reason: 'end_turn',
            final_content: [],
            usage: {
              input_tokens: 0,
              output_tokens: DELTAS_PER_MESSAGE,
              cached_input_tokens: 0,
              cache_creation_input_tokens: 0,
              cost_usd: 0,
              pricing_version: 'bench',
            },
          },
        });
        stream.message += 1;
        stream.inMessage = 0;
      }
    },
    connections: () => server.hub.connectionCount(),
    prepareReplay: async (count) => {
      const replay = runtime.createSession({ workspacePath: dir });
      await context.flush();
      const since = firstId.get(replay.id) as string;
      for (let i = 0; i < count; ) {
        const end = Math.min(count, i + 1_000);
        for (; i < end; i += 1) context.bus.emit(benchInput(i, replay.id, null));
        await context.flush();
      }
      return { sessionId: replay.id, since, url: null };
    },
    close: async () => {
      await server.close();
      await runtime.close();
      await context.close();
    },
  };
}

/**
 * The bare `ws` server: subscribe gets an ack, `replay` gets the prepared frames, deltas go to all.
 * `corked`: each client's frames of one event-loop turn leave in one socket write (cork, send each,
 * uncork at the end of the turn), the coalescing metis does; else one write per frame.
 */
async function startBareWs(corked: boolean): Promise<Emitter> {
  const http = createServer((_request, response) => {
    response.writeHead(404).end();
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PAYLOAD, perMessageDeflate: false });
  const subscribed = new Set<WebSocket>();
  const socketOf = new Map<WebSocket, Duplex>();
  let replayFrames: string[] = [];
  let uncorkScheduled = false;
  const uncorkAll = () => {
    uncorkScheduled = false;
    for (const socket of socketOf.values()) while (socket.writableCorked > 0) socket.uncork();
  };
  http.on('upgrade', (request, socket, head) => {
    wss.handleUpgrade(request, socket, head, (ws) => {
      socketOf.set(ws, socket);
      ws.on('message', (data) => {
        const text = String(data);
        if (text === 'replay') {
          for (const frame of replayFrames) ws.send(frame);
          return;
        }
        subscribed.add(ws);
        ws.send('{"type":"subscribe_ack"}');
      });
      ws.on('close', () => {
        subscribed.delete(ws);
        socketOf.delete(ws);
      });
    });
  });
  const base = await listen(http);
  const sessionId = `sess_${newEventId().slice(4)}`;
  const turnId = `turn_${newEventId().slice(4)}`;
  const parentId = newEventId();
  let message = 0;
  let inMessage = 0;
  const target: WireTarget = { kind: 'ws', url: `${base.replace('http', 'ws')}/` };
  const sendCorked = (ws: WebSocket, frame: string) => {
    const socket = socketOf.get(ws);
    if (socket !== undefined && socket.writableCorked === 0) socket.cork();
    ws.send(frame);
    if (!uncorkScheduled) {
      uncorkScheduled = true;
      setImmediate(uncorkAll);
    }
  };
  return {
    target,
    newSession: async () => target,
    emit: (seq) => {
      const event = deltaEvent(sessionId, turnId, parentId, `msg_bench_${message}`, seq);
      const frame = `{"type":"event","event":${JSON.stringify(event)}}`;
      if (corked) for (const ws of subscribed) sendCorked(ws, frame);
      else for (const ws of subscribed) ws.send(frame);
      inMessage += 1;
      if (inMessage === DELTAS_PER_MESSAGE) {
        message += 1;
        inMessage = 0;
      }
    },
    connections: () => wss.clients.size,
    prepareReplay: async (count) => {
      // The same events metis stores and replays, serialized once up front: the transport's floor.
      const replaySession = `sess_${newEventId().slice(4)}`;
      replayFrames = [];
      for (let i = 0; i < count; i += 1) {
        const input = benchInput(i, replaySession, null);
        const event = {
          id: newEventId(),
          timestamp: microsToIso(nowMicros()),
          session_id: replaySession,
          turn_id: input.turn_id,
          parent_event_id: null,
          type: BENCH_EVENT_TYPE,
          actor: 'agent',
          payload: benchPayload(i),
          sensitivity: 'pseudonymous',
          seq: i + 2,
        };
        replayFrames.push(`{"type":"event","event":${JSON.stringify(event)}}`);
      }
      return { sessionId: replaySession, since: null, url: `${base.replace('http', 'ws')}/` };
    },
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/** socket.io with its defaults but the WebSocket transport only and no pings during a run. */
async function startSocketIo(): Promise<Emitter> {
  const http = createServer();
  const io = new SioServer(http, {
    transports: ['websocket'],
    serveClient: false,
    perMessageDeflate: false,
    maxHttpBufferSize: MAX_PAYLOAD,
    pingInterval: 600_000,
    pingTimeout: 600_000,
  });
  const base = await listen(http);
  const sessionId = `sess_${newEventId().slice(4)}`;
  const turnId = `turn_${newEventId().slice(4)}`;
  const parentId = newEventId();
  let message = 0;
  let inMessage = 0;
  const target: WireTarget = { kind: 'sio', url: base };
  return {
    target,
    newSession: async () => target,
    emit: (seq) => {
      io.emit('event', deltaEvent(sessionId, turnId, parentId, `msg_bench_${message}`, seq));
      inMessage += 1;
      if (inMessage === DELTAS_PER_MESSAGE) {
        message += 1;
        inMessage = 0;
      }
    },
    connections: () => io.engine.clientsCount,
    prepareReplay: () => Promise.reject(new Error('no replay baseline on socket.io')),
    close: async () => {
      io.disconnectSockets(true);
      await io.close();
    },
  };
}

const emitter =
  mode === 'metis'
    ? await startMetis()
    : mode === 'sio'
      ? await startSocketIo()
      : await startBareWs(mode === 'wsc');
let seq = 0;

const handlers: Handlers = {
  target: () => emitter.target,

  /**
   * `count` deltas at `rate` per second: every ~1 ms timer tick emits the ones that are due. Also
   * watches the connection count, to tell when the server dropped a (stalled) client.
   */
  emitPaced: ({ rate, count, sessionId }: { rate: number; count: number; sessionId?: string }) => {
    const intervalNs = 1e9 / rate;
    const startNs = nowNs();
    const connectionsAtStart = emitter.connections();
    let droppedAfterMs: number | null = null;
    let sent = 0;
    let ticks = 0;
    return new Promise((resolve) => {
      const tick = () => {
        ticks += 1;
        const now = nowNs();
        const due = Math.min(count, Math.floor((now - startNs) / intervalNs) + 1);
        while (sent < due) {
          emitter.emit(seq, sessionId);
          seq += 1;
          sent += 1;
        }
        if (droppedAfterMs === null && emitter.connections() < connectionsAtStart) {
          droppedAfterMs = (now - startNs) / 1e6;
        }
        if (sent < count) setTimeout(tick, 1);
        else resolve({ startNs, endNs: nowNs(), ticks, droppedAfterMs, connections: emitter.connections() });
      };
      tick();
    });
  },

  /** `count` deltas as fast as the server goes: `chunk` of them per event-loop turn. */
  emitBurst: async ({ count, chunk }: { count: number; chunk: number }) => {
    const startNs = nowNs();
    for (let sent = 0; sent < count; ) {
      const end = Math.min(count, sent + chunk);
      for (; sent < end; sent += 1) {
        emitter.emit(seq);
        seq += 1;
      }
      await immediate();
    }
    return { startNs, endNs: nowNs() };
  },

  connections: () => emitter.connections(),
  newSession: () => emitter.newSession(),
  prepareReplay: ({ count }: { count: number }) => emitter.prepareReplay(count),
  cpu: () => process.cpuUsage(),

  /**
   * process.memoryUsage() after the garbage has been collected (the process runs with --expose-gc),
   * the last time with V8's memory-reducing "last resort" GC, which also hands freed pages back: the RSS
   * then moves with what is live rather than with what the heap once held.
   */
  memory: async () => {
    const gc = (globalThis as { gc?: (options?: object) => void }).gc;
    if (gc === undefined) throw new Error('run with --expose-gc');
    for (let i = 0; i < 3; i += 1) {
      gc();
      await sleep(20);
    }
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    await sleep(20);
    return process.memoryUsage();
  },
};

serveRpc(handlers, () => emitter.close());
