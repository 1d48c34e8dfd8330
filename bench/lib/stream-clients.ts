/**
 * The client process of the stream benchmark: `node --import tsx stream-clients.ts`, driven by
 * bench/stream.ts over IPC. It holds every benchmark client, so the server process under test has its
 * event loop (and its memory) to itself.
 *
 *   readers     minimal WebSocket readers (stream-wire.ts) that count the deltas, check their order and
 *               record each one's latency: receipt time minus the send time in its text, both on the
 *               machine's monotonic clock;
 *   verifier    one real client library (`ws`, or `socket.io-client` for socket.io) that JSON-decodes the
 *               same stream and checks it: the readers' figures are about real, well-formed events;
 *   replay      one reader that reconnects with a cursor and times the replay;
 *   idle        many `ws` clients that attach, subscribe and then sit there (the memory figure).
 */
import { type Socket as SioSocket, io as sioConnect } from 'socket.io-client';
import WebSocket from 'ws';
import { type Handlers, serveRpc } from './stream-ipc.js';
import {
  connectUrl,
  type FrameSink,
  nowNs,
  parseDelta,
  RawWsClient,
  startsWith,
  type WireTarget,
} from './stream-wire.js';

const SUBSCRIBE_LIVE = JSON.stringify({
  type: 'subscribe',
  filter: 'preset:full',
  since: null,
  snapshot: false,
});
const BARE_SUBSCRIBE = '{"type":"subscribe"}';
const ACK = Buffer.from('{"type":"subscribe_ack"');
const SUBSCRIBE_ERROR = Buffer.from('{"type":"subscribe_error"');
const EVENT = Buffer.from('{"type":"event"');
const PING = Buffer.from('{"type":"ping"');
const SIO_OPEN = Buffer.from('0{');
const SIO_CONNECTED = Buffer.from('40');
const SIO_CONNECT_ERROR = Buffer.from('44');
const CONNECT_TIMEOUT_MS = 15_000;

/** Per-client bookkeeping of one run: count, order, latency. */
class Tally {
  got = 0;
  gaps = 0;
  lastAtNs = 0;
  expected = 0;
  latencies: Float64Array | null = null;
  latencyCount = 0;
  private nextSeq = -1;

  arm(expected: number, latency: boolean): void {
    this.got = 0;
    this.gaps = 0;
    this.lastAtNs = 0;
    this.expected = expected;
    this.nextSeq = -1;
    this.latencies = latency ? new Float64Array(expected) : null;
    this.latencyCount = 0;
  }

  record(seq: number, sentNs: number, atNs: number): void {
    if (this.nextSeq !== -1 && seq !== this.nextSeq) this.gaps += 1;
    this.nextSeq = seq + 1;
    this.got += 1;
    this.lastAtNs = atNs;
    const latencies = this.latencies;
    if (latencies !== null && this.latencyCount < latencies.length) {
      latencies[this.latencyCount] = (atNs - sentNs) / 1e6;
      this.latencyCount += 1;
    }
  }

  get done(): boolean {
    return this.got >= this.expected;
  }
}

interface Client {
  readonly tally: Tally;
  stalled: boolean;
  closeCode: number | null;
  close(): void;
  readonly isClosed: boolean;
}

const scratch = new Float64Array(1);

/** A reader: see the file comment. */
class Reader implements FrameSink, Client {
  readonly tally = new Tally();
  stalled = false;
  closeCode: number | null = null;
  private readonly raw = new RawWsClient(this);
  private ready = false;
  private settle: { resolve: () => void; reject: (e: Error) => void } | null = null;

  constructor(private readonly kind: WireTarget['kind']) {}

  async open(target: WireTarget): Promise<void> {
    const url = await connectUrl(target);
    const ready = new Promise<void>((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    ready.catch(() => undefined); // awaited below; a failed upgrade must not leave it unhandled
    const timer = setTimeout(
      () => this.settle?.reject(new Error(`no subscription within ${CONNECT_TIMEOUT_MS} ms`)),
      CONNECT_TIMEOUT_MS,
    );
    try {
      await this.raw.open(url);
      if (this.kind === 'metis') this.raw.sendText(SUBSCRIBE_LIVE);
      else if (this.kind === 'ws') this.raw.sendText(BARE_SUBSCRIBE);
      // socket.io: the server opens with `0{...}`, answered in frame() with a namespace connect.
      await ready;
    } finally {
      clearTimeout(timer);
    }
  }

  pause(): void {
    this.stalled = true;
    this.raw.pause();
  }

  close(): void {
    this.raw.close(this.stalled);
  }

  get isClosed(): boolean {
    return this.raw.isClosed;
  }

  frame(buf: Buffer, start: number, end: number, atNs: number): void {
    if (this.ready) {
      const seq = parseDelta(buf, start, end, scratch);
      if (seq >= 0) this.tally.record(seq, scratch[0]!, atNs);
      else this.control(buf, start, end);
      return;
    }
    if (this.kind === 'sio') {
      if (startsWith(buf, start, end, SIO_OPEN)) this.raw.sendText('40');
      else if (startsWith(buf, start, end, SIO_CONNECTED)) this.becomeReady();
      else if (startsWith(buf, start, end, SIO_CONNECT_ERROR)) {
        this.settle?.reject(new Error(`socket.io refused: ${buf.toString('utf8', start, end)}`));
      }
      return;
    }
    if (startsWith(buf, start, end, ACK)) this.becomeReady();
    else if (startsWith(buf, start, end, SUBSCRIBE_ERROR)) {
      this.settle?.reject(new Error(`subscribe refused: ${buf.toString('utf8', start, end)}`));
    }
  }

  closed(code: number, reason: string): void {
    this.closeCode = code;
    this.settle?.reject(new Error(`closed before subscribing: ${code} ${reason}`));
  }

  private becomeReady(): void {
    this.ready = true;
    this.settle?.resolve();
    this.settle = null;
  }

  /** Frames that are not deltas: answer heartbeats (rare: never during a short run). */
  private control(buf: Buffer, start: number, end: number): void {
    if (this.kind === 'metis' && startsWith(buf, start, end, PING)) {
      const ping = JSON.parse(buf.toString('utf8', start, end)) as { nonce: string };
      this.raw.sendText(JSON.stringify({ type: 'pong', nonce: ping.nonce }));
    } else if (this.kind === 'sio' && end - start === 1 && buf[start] === 0x32 /* 2 */) {
      this.raw.sendText('3');
    }
  }
}

function seqOfText(text: unknown): number {
  if (typeof text !== 'string' || !text.startsWith('#')) return -1;
  return Number(text.slice(1, text.indexOf(':')));
}

/** The verifier: a real client library decoding every frame (see the file comment). */
class Verifier implements Client {
  readonly tally = new Tally();
  stalled = false;
  closeCode: number | null = null;
  private ws: WebSocket | null = null;
  private sio: SioSocket | null = null;

  async open(target: WireTarget): Promise<void> {
    if (target.kind === 'sio') {
      const socket = sioConnect(target.url, {
        transports: ['websocket'],
        reconnection: false,
        forceNew: true,
      });
      this.sio = socket;
      socket.on('event', (event: { payload?: { text?: unknown } }) => {
        const seq = seqOfText(event.payload?.text);
        if (seq >= 0) this.tally.record(seq, 0, nowNs());
      });
      socket.on('disconnect', () => {
        this.closeCode ??= 1000;
      });
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', () => resolve());
        socket.once('connect_error', reject);
      });
      return;
    }
    const ws = new WebSocket(await connectUrl(target), { perMessageDeflate: false });
    this.ws = ws;
    await new Promise<void>((resolve, reject) => {
      ws.on('message', (data) => {
        const frame = JSON.parse(String(data)) as {
          type: string;
          nonce?: string;
          event?: { payload?: { text?: unknown } };
        };
        if (frame.type === 'subscribe_ack') resolve();
        else if (frame.type === 'subscribe_error') reject(new Error(`subscribe refused: ${String(data)}`));
        else if (frame.type === 'ping') ws.send(JSON.stringify({ type: 'pong', nonce: frame.nonce }));
        else if (frame.type === 'event') {
          const seq = seqOfText(frame.event?.payload?.text);
          if (seq >= 0) this.tally.record(seq, 0, nowNs());
        }
      });
      ws.once('open', () => ws.send(target.kind === 'metis' ? SUBSCRIBE_LIVE : BARE_SUBSCRIBE));
      ws.once('error', reject);
      ws.once('close', (code) => {
        this.closeCode = code;
        reject(new Error(`closed before subscribing: ${code}`));
      });
    });
  }

  close(): void {
    this.ws?.close();
    this.sio?.disconnect();
  }

  get isClosed(): boolean {
    if (this.ws !== null) return this.ws.readyState === WebSocket.CLOSED;
    return this.sio === null || !this.sio.connected;
  }
}

/** The readers (and the verifier) that connected together to one target. */
interface Group {
  readers: Reader[];
  verifier: Verifier | null;
}

const groups = new Map<number, Group>();
let nextGroup = 1;
let idle: WebSocket[] = [];

function group(id: number): Group {
  const found = groups.get(id);
  if (found === undefined) throw new Error(`no client group ${id}`);
  return found;
}

function active(g: Group): Client[] {
  const all: Client[] = g.readers.filter((r) => !r.stalled);
  if (g.verifier !== null) all.push(g.verifier);
  return all;
}

async function inBatches<T>(
  count: number,
  concurrency: number,
  open: (i: number) => Promise<T>,
): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < count; i += concurrency) {
    const batch = Array.from({ length: Math.min(concurrency, count - i) }, (_, k) => open(i + k));
    out.push(...(await Promise.all(batch)));
  }
  return out;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitClosed(
  clients: readonly { readonly isClosed: boolean }[],
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (clients.some((c) => !c.isClosed) && Date.now() < deadline) await sleep(10);
}

async function closeGroup(g: Group): Promise<void> {
  const all: Client[] = [...g.readers, ...(g.verifier === null ? [] : [g.verifier])];
  for (const client of all) client.close();
  await waitClosed(all, 5_000);
}

const handlers: Handlers = {
  cpu: () => process.cpuUsage(),

  /**
   * Opens a group of `count` readers (and the verifier when asked), waits until each one is subscribed
   * and returns the group's id. Groups stay open until `disconnect`, so runs against different servers
   * can alternate without reconnecting.
   */
  connect: async ({
    target,
    count,
    withVerifier,
  }: {
    target: WireTarget;
    count: number;
    withVerifier?: boolean;
  }) => {
    const readers = await inBatches(count, 25, async () => {
      const reader = new Reader(target.kind);
      await reader.open(target);
      return reader;
    });
    let verifier: Verifier | null = null;
    if (withVerifier === true) {
      verifier = new Verifier();
      await verifier.open(target);
    }
    const id = nextGroup++;
    groups.set(id, { readers, verifier });
    return id;
  },

  /** Stops reading on the group's last `count` readers: they stay connected but take nothing more. */
  stall: ({ group: id, count }: { group: number; count: number }) => {
    const g = group(id);
    for (const reader of g.readers.slice(g.readers.length - count)) reader.pause();
    return null;
  },

  arm: ({ group: id, expected, latency }: { group: number; expected: number; latency: boolean }) => {
    for (const client of active(group(id))) client.tally.arm(expected, latency);
    return null;
  },

  /** Waits until every active client of the group has its deltas (or the time is up); reports the run. */
  collect: async ({ group: id, timeoutMs }: { group: number; timeoutMs: number }) => {
    const g = group(id);
    const clients = active(g);
    const deadline = Date.now() + timeoutMs;
    while (clients.some((c) => !c.tally.done && c.closeCode === null) && Date.now() < deadline)
      await sleep(5);
    let total = 0;
    for (const c of clients) total += c.tally.latencyCount;
    const latencies = new Float64Array(total);
    let offset = 0;
    let lastAtNs = 0;
    for (const c of clients) {
      if (c.tally.latencies !== null) {
        latencies.set(c.tally.latencies.subarray(0, c.tally.latencyCount), offset);
        offset += c.tally.latencyCount;
      }
      if (c.tally.lastAtNs > lastAtNs) lastAtNs = c.tally.lastAtNs;
    }
    return {
      clients: clients.length,
      latencies,
      lastAtNs,
      got: clients.reduce((sum, c) => sum + c.tally.got, 0),
      expected: clients.reduce((sum, c) => sum + c.tally.expected, 0),
      gaps: clients.reduce((sum, c) => sum + c.tally.gaps, 0),
      incomplete: clients.filter((c) => !c.tally.done).length,
      closed: clients.filter((c) => c.closeCode !== null).map((c) => c.closeCode),
      verifier: g.verifier === null ? null : { got: g.verifier.tally.got, gaps: g.verifier.tally.gaps },
      stalledClosed: g.readers.filter((r) => r.stalled).map((r) => r.closeCode),
    };
  },

  /** Closes the group's readers and verifier. */
  disconnect: async ({ group: id }: { group: number }) => {
    const g = group(id);
    groups.delete(id);
    await closeGroup(g);
    return null;
  },

  /**
   * A reconnecting client: connect, then time from the subscribe (metis: with `since`; bare: a
   * `replay` request) until the `expected`-th event frame is in.
   */
  replay: async ({
    target,
    since,
    expected,
  }: {
    target: WireTarget;
    since: string | null;
    expected: number;
  }) => {
    let got = 0;
    let ackCount = -1;
    let doneAtNs = 0;
    let settle!: { resolve: () => void; reject: (e: Error) => void };
    const done = new Promise<void>((resolve, reject) => {
      settle = { resolve, reject };
    });
    done.catch(() => undefined); // awaited below
    const raw = new RawWsClient({
      frame: (buf, start, end, atNs) => {
        if (startsWith(buf, start, end, EVENT)) {
          got += 1;
          if (got === expected) {
            doneAtNs = atNs;
            settle.resolve();
          }
        } else if (startsWith(buf, start, end, ACK)) {
          ackCount =
            (JSON.parse(buf.toString('utf8', start, end)) as { replay_event_count?: number })
              .replay_event_count ?? -1;
        } else if (startsWith(buf, start, end, SUBSCRIBE_ERROR)) {
          settle.reject(new Error(`replay refused: ${buf.toString('utf8', start, end)}`));
        }
      },
      closed: (code, reason) =>
        settle.reject(new Error(`closed during replay after ${got}: ${code} ${reason}`)),
    });
    await raw.open(await connectUrl(target));
    const timer = setTimeout(() => settle.reject(new Error(`replay: ${got}/${expected} after 60 s`)), 60_000);
    const startNs = nowNs();
    raw.sendText(
      target.kind === 'metis'
        ? JSON.stringify({ type: 'subscribe', filter: 'preset:full', since, snapshot: false })
        : 'replay',
    );
    try {
      await done;
    } finally {
      clearTimeout(timer);
      raw.close();
    }
    await waitClosed([raw], 2_000);
    return { ms: (doneAtNs - startNs) / 1e6, got, ackCount };
  },

  /** Opens `count` `ws` clients that attach, subscribe and then stay idle. */
  idleOpen: async ({ target, count }: { target: WireTarget; count: number }) => {
    const opened = await inBatches(count, 50, async () => {
      const ws = new WebSocket(await connectUrl(target), { perMessageDeflate: false });
      await new Promise<void>((resolve, reject) => {
        ws.on('message', (data) => {
          const text = String(data);
          if (text.startsWith('{"type":"subscribe_ack"')) resolve();
          else if (text.startsWith('{"type":"ping"')) {
            ws.send(JSON.stringify({ type: 'pong', nonce: (JSON.parse(text) as { nonce: string }).nonce }));
          }
        });
        ws.once('open', () => ws.send(target.kind === 'metis' ? SUBSCRIBE_LIVE : BARE_SUBSCRIBE));
        ws.once('error', reject);
        ws.once('close', (code) => reject(new Error(`idle client closed: ${code}`)));
      });
      return ws;
    });
    idle.push(...opened);
    return { open: idle.filter((ws) => ws.readyState === WebSocket.OPEN).length };
  },

  idleClose: async () => {
    for (const ws of idle) ws.terminate();
    idle = [];
    await sleep(50);
    return null;
  },
};

serveRpc(handlers, async () => {
  for (const g of groups.values()) {
    for (const reader of g.readers) reader.close();
    g.verifier?.close();
  }
  for (const ws of idle) ws.terminate();
});
