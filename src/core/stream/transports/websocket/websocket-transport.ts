import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import { type EventFrames, encodeTextFrame } from '../../event-frames.js';
import type { StreamTransport, TransportHandlers } from '../../stream-transport.js';

/** A WebSocket from `ws`; frames are pre-encoded and written to its socket directly (event-frames.ts). */
export class WebSocketTransport implements StreamTransport {
  readonly kind = 'websocket' as const;
  readonly answersPings = true;
  readonly singleSubscription = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly socket: Duplex,
  ) {}

  get writableHighWaterMark(): number {
    return this.socket.writableHighWaterMark;
  }

  isOpen(): boolean {
    return this.ws.readyState === this.ws.OPEN;
  }

  bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  encode(text: string): Buffer {
    return encodeTextFrame(text);
  }

  encodeEvent(frames: EventFrames): Buffer {
    return frames.webSocketFrame();
  }

  write(data: Buffer): void {
    this.socket.write(data);
  }

  cork(): void {
    this.socket.cork();
  }

  uncork(): void {
    this.socket.uncork();
  }

  close(code: number, reason: string): void {
    this.ws.close(code, reason);
  }

  ping(): void {
    if (this.isOpen()) this.ws.ping();
  }

  listen(handlers: TransportHandlers): void {
    this.ws.on('message', (data, isBinary) => handlers.message(data, isBinary));
    this.ws.on('pong', () => handlers.pong());
    this.ws.on('close', () => handlers.close());
    this.ws.on('error', (error) => handlers.error(error));
    this.socket.on('drain', () => handlers.drain());
  }
}
