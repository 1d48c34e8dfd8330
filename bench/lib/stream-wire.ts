/**
 * Shared pieces of the stream benchmark: the clock both processes stamp with, the delta text that
 * carries a sequence number and a send time, and a minimal WebSocket reader for the client process.
 *
 * The reader speaks just enough RFC 6455 to attach and read: a handshake, unmasked server frames,
 * masked client frames. It hands each frame to its sink as a byte range of the received chunk, with
 * no copy, no string and no JSON, so that 100 readers in one process cost far less than the server
 * that feeds them: the figures then measure the server, not the client library. (A real `ws` or
 * `socket.io-client` client checks the same stream in the verification step of bench/stream.ts.)
 */
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';

/**
 * Nanoseconds on CLOCK_MONOTONIC, which every process on the machine shares (libuv's hrtime), as a
 * double: exact to the nanosecond for ~104 days of uptime.
 */
export function nowNs(): number {
  return Number(process.hrtime.bigint());
}

/** Where each benchmark client connects. Metis needs an attach handshake per connection. */
export type WireTarget =
  | { readonly kind: 'metis'; readonly baseUrl: string; readonly sessionId: string }
  | { readonly kind: 'ws'; readonly url: string }
  | { readonly kind: 'sio'; readonly url: string };

/** The ws:// URL of one new connection to `target` (for metis: `GET /sessions/{id}` → `ws_url`). */
export async function connectUrl(target: WireTarget): Promise<string> {
  switch (target.kind) {
    case 'metis': {
      const response = await fetch(`${target.baseUrl}/sessions/${target.sessionId}`);
      const body = (await response.json()) as { ws_url?: string };
      if (response.status !== 200 || typeof body.ws_url !== 'string') {
        throw new Error(`attach handshake failed: ${response.status} ${JSON.stringify(body)}`);
      }
      return body.ws_url;
    }
    case 'sio':
      return `${target.url.replace(/^http/, 'ws')}/socket.io/?EIO=4&transport=websocket`;
    case 'ws':
      return target.url;
  }
}

/** The text of a benchmark delta: `#<seq>:<send time in ns>`, ~23 characters like a few tokens. */
export function deltaText(seq: number): string {
  return `#${seq}:${nowNs()}`;
}

const DELTA_NEEDLE = Buffer.from('"text":"#');

/**
 * Finds the benchmark delta text in a frame (any protocol: it is inside the JSON either way) and
 * returns its sequence number, writing the send time to `out[0]`; -1 when the frame is not a delta.
 */
export function parseDelta(buf: Buffer, start: number, end: number, out: Float64Array): number {
  const at = buf.indexOf(DELTA_NEEDLE, start);
  if (at < 0 || at + DELTA_NEEDLE.length >= end) return -1;
  let p = at + DELTA_NEEDLE.length;
  let seq = 0;
  let c = buf[p]!;
  while (c !== 58 /* : */) {
    seq = seq * 10 + (c - 48);
    c = buf[++p]!;
  }
  let ns = 0;
  c = buf[++p]!;
  while (c !== 34 /* " */) {
    ns = ns * 10 + (c - 48);
    c = buf[++p]!;
  }
  out[0] = ns;
  return seq;
}

/** Whether the frame's payload starts with `prefix`. */
export function startsWith(buf: Buffer, start: number, end: number, prefix: Buffer): boolean {
  return (
    end - start >= prefix.length && buf.compare(prefix, 0, prefix.length, start, start + prefix.length) === 0
  );
}

export interface FrameSink {
  /**
   * One complete text (or binary) frame: bytes `start`..`end` of `buf`, valid during the call only.
   * `atNs` is when the chunk that completed it was read.
   */
  frame(buf: Buffer, start: number, end: number, atNs: number): void;
  /** The connection closed; `code` is the close frame's code, 1006 when there was none. */
  closed(code: number, reason: string): void;
}

/** Every reader of the process reads into this buffer; frames are handled before the next read. */
const READ_BUFFER = Buffer.allocUnsafe(256 * 1024);

/** A minimal WebSocket client: see the file comment. */
export class RawWsClient {
  private socket: Socket | null = null;
  private rest: Buffer | null = null;
  private upgraded = false;
  private closeCode: number | null = null;
  private closeReason = '';
  private closing = false;

  constructor(private readonly sink: FrameSink) {}

  /** Connects and upgrades; frames that arrive with the 101 go to the sink before this resolves. */
  open(url: string, timeoutMs = 15_000): Promise<void> {
    const target = new URL(url);
    return new Promise((resolve, reject) => {
      let head: Buffer = Buffer.alloc(0);
      const onRead = (nread: number, buf: Buffer): boolean => {
        if (this.upgraded) {
          this.onBytes(buf, nread);
          return true;
        }
        head = Buffer.concat([head, buf.subarray(0, nread)]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return true;
        clearTimeout(timer);
        const status = head.toString('latin1', 0, head.indexOf('\r\n'));
        if (!status.startsWith('HTTP/1.1 101 ')) {
          socket.destroy();
          reject(new Error(`WebSocket upgrade refused: ${status}`));
          return false;
        }
        this.upgraded = true;
        resolve();
        const rest = head.subarray(end + 4);
        if (rest.length > 0) this.onBytes(rest, rest.length);
        return true;
      };
      // `onread` reads into one shared buffer and skips the stream machinery: a reader costs a
      // callback per read and nothing more.
      const socket = connect({
        host: target.hostname,
        port: Number(target.port),
        onread: { buffer: READ_BUFFER, callback: onRead },
      });
      this.socket = socket;
      socket.setNoDelay(true);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`WebSocket upgrade to ${target.host} timed out`));
      }, timeoutMs);
      socket.once('connect', () => {
        socket.write(
          `GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\nUpgrade: websocket\r\n` +
            `Connection: Upgrade\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\n` +
            'Sec-WebSocket-Version: 13\r\n\r\n',
        );
      });
      socket.on('error', (error) => {
        clearTimeout(timer);
        if (!this.upgraded) reject(error);
      });
      socket.on('close', () => {
        clearTimeout(timer);
        if (!this.upgraded) reject(new Error('connection closed during the WebSocket upgrade'));
        else this.sink.closed(this.closeCode ?? 1006, this.closeReason);
      });
    });
  }

  sendText(text: string): void {
    this.sendFrame(Buffer.from(text), 0x1);
  }

  /** Stops reading: the kernel buffers fill and then the server's writes back up (a stalled client). */
  pause(): void {
    this.socket?.pause();
  }

  /** Sends a close frame and ends the socket; `destroy` drops it at once. */
  close(destroy = false): void {
    const socket = this.socket;
    if (socket === null || socket.destroyed) return;
    if (destroy) {
      this.closing = true;
      socket.destroy();
      return;
    }
    if (this.closing) return;
    const code = Buffer.alloc(2);
    code.writeUInt16BE(1000);
    this.sendFrame(code, 0x8);
    this.closing = true;
    socket.end();
  }

  get isClosed(): boolean {
    return this.socket === null || this.socket.destroyed;
  }

  private sendFrame(payload: Buffer, opcode: number): void {
    const socket = this.socket;
    if (socket === null || socket.destroyed || this.closing) return;
    const len = payload.length;
    const hdr = len < 126 ? 2 : len < 65_536 ? 4 : 10;
    const frame = Buffer.allocUnsafe(hdr + 4 + len);
    frame[0] = 0x80 | opcode;
    if (len < 126) frame[1] = 0x80 | len;
    else if (len < 65_536) {
      frame[1] = 0x80 | 126;
      frame.writeUInt16BE(len, 2);
    } else {
      frame[1] = 0x80 | 127;
      frame.writeUInt32BE(0, 2);
      frame.writeUInt32BE(len, 6);
    }
    const mask = randomBytes(4);
    mask.copy(frame, hdr);
    for (let i = 0; i < len; i += 1) frame[hdr + 4 + i] = payload[i]! ^ mask[i & 3]!;
    socket.write(frame);
  }

  /** Parses the frames in `chunk[0, length)`; `chunk` may be reused after this returns. */
  private onBytes(chunk: Buffer, length: number): void {
    const atNs = nowNs();
    let buf = chunk;
    let n = length;
    if (this.rest !== null) {
      buf = Buffer.concat([this.rest, chunk.subarray(0, length)]);
      n = buf.length;
      this.rest = null;
    }
    let off = 0;
    while (n - off >= 2) {
      const b0 = buf[off]!;
      const b1 = buf[off + 1]!;
      if ((b1 & 0x80) !== 0) throw new Error('server sent a masked frame');
      if ((b0 & 0x80) === 0) throw new Error('fragmented frames are not expected from these servers');
      let len = b1 & 0x7f;
      let hdr = 2;
      if (len === 126) {
        if (n - off < 4) break;
        len = buf.readUInt16BE(off + 2);
        hdr = 4;
      } else if (len === 127) {
        if (n - off < 10) break;
        len = buf.readUInt32BE(off + 2) * 2 ** 32 + buf.readUInt32BE(off + 6);
        hdr = 10;
      }
      if (n - off < hdr + len) break;
      const start = off + hdr;
      off = start + len;
      const opcode = b0 & 0x0f;
      if (opcode === 0x1 || opcode === 0x2) this.sink.frame(buf, start, off, atNs);
      else if (opcode === 0x8) {
        this.closeCode = len >= 2 ? buf.readUInt16BE(start) : 1005;
        this.closeReason = buf.toString('utf8', start + 2, off);
        this.close(); // answer the close handshake
      } else if (opcode === 0x9) this.sendFrame(Buffer.from(buf.subarray(start, off)), 0xa);
    }
    if (off < n) this.rest = Buffer.from(buf.subarray(off, n)); // a copy: the read buffer is shared
  }
}
